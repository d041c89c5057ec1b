/**
 * The references the lab's proxy is measured against in `lab bench`: the simplest Ktor proxy a
 * user would write, in the two forms a user would choose between. One singleton client, no
 * plugins, no metrics, no checks.
 *
 * - `LEAN_BODY=whole` (the default): `client.get(upstream + uri)`, `call.respondBytes(...)`. Ktor
 *   reads every body into memory first: the cheapest path, and no use for a 100 MB body.
 * - `LEAN_BODY=streamed`: `client.prepareGet(...).execute { }` and `call.respondBytesWriter { }`
 *   copying the upstream's body as it arrives: what a proxy must do to pass a large body with
 *   flat memory, as the lab's proxy does. Against the whole form it shows what streaming costs on
 *   its own, for each engine.
 *
 * Its client is built by the lab's own [ClientFactory] with the same settings (limits, timeouts),
 * so the difference between the lab's proxy and these is the lab's server side, not the engine's
 * configuration.
 *
 * CLIENT_ENGINE=okhttp UPSTREAM_URL=http://127.0.0.1:18080 PORT=18091 java -jar lean-proxy/target/lean-proxy.jar
 */
package lab.lean

import io.ktor.client.request.get
import io.ktor.client.request.prepareGet
import io.ktor.client.statement.bodyAsChannel
import io.ktor.client.statement.readRawBytes
import io.ktor.http.contentLength
import io.ktor.http.contentType
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import io.ktor.server.request.uri
import io.ktor.server.response.respondBytes
import io.ktor.server.response.respondBytesWriter
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.routing
import io.ktor.utils.io.copyTo
import lab.proxy.ClientFactory
import lab.proxy.ConfigException
import lab.proxy.ProxyConfig
import kotlin.system.exitProcess

/** How the lean proxy takes the upstream's body: read whole, or streamed to the caller. */
enum class LeanBody { WHOLE, STREAMED }

/** `LEAN_BODY` as given (unset: whole); a value it does not know is a configuration error. */
fun leanBody(env: Map<String, String>): LeanBody {
    val value = env["LEAN_BODY"]?.trim().orEmpty()
    return LeanBody.entries.firstOrNull { it.name.equals(value.ifEmpty { "whole" }, ignoreCase = true) }
        ?: throw ConfigException("LEAN_BODY='$value' is not one of whole, streamed")
}

fun main() {
    val env = System.getenv()
    // The same variables as the lab's proxy; only the engine, the upstream and where to listen matter.
    val (config, body) = try {
        ProxyConfig.fromEnv(env + ("CLIENT_LIFETIME" to "singleton")) to leanBody(env)
    } catch (e: ConfigException) {
        System.err.println("lean proxy: configuration error: ${e.message}")
        exitProcess(2)
    }
    ClientFactory.prepareJvm(config)
    val client = ClientFactory.create(config)
    val upstream = config.upstreamUrl
    val name = if (body == LeanBody.STREAMED) "lean-streamed-${config.engine.id}" else "lean-${config.engine.id}"
    embeddedServer(Netty, port = config.port, host = config.host) {
        routing {
            get("/health") { call.respondText("ok $name\n") }
            when (body) {
                LeanBody.WHOLE -> get("{...}") {
                    val response = client.get(upstream + call.request.uri)
                    call.respondBytes(response.readRawBytes(), response.contentType(), response.status)
                }
                LeanBody.STREAMED -> get("{...}") {
                    client.prepareGet(upstream + call.request.uri).execute { response ->
                        call.respondBytesWriter(response.contentType(), response.status, response.contentLength()) {
                            response.bodyAsChannel().copyTo(this)
                        }
                    }
                }
            }
        }
    }.start(wait = true)
}
