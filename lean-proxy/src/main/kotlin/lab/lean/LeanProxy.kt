/**
 * The reference the lab's proxy is measured against in `lab bench`: the simplest Ktor proxy a
 * user would write. One singleton client, `client.get(upstream + uri)`, `call.respondBytes(...)`,
 * no plugins, no metrics, no streaming, no checks. Its client is built by the lab's own
 * [ClientFactory] with the same settings (limits, timeouts), so the difference between the two
 * is the lab's server side, not the engine's configuration.
 *
 * CLIENT_ENGINE=okhttp UPSTREAM_URL=http://127.0.0.1:18080 PORT=18091 java -jar lean-proxy/target/lean-proxy.jar
 */
package lab.lean

import io.ktor.client.request.get
import io.ktor.client.statement.readRawBytes
import io.ktor.http.ContentType
import io.ktor.http.HttpHeaders
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import io.ktor.server.request.uri
import io.ktor.server.response.respondBytes
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.routing
import lab.proxy.ClientFactory
import lab.proxy.ConfigException
import lab.proxy.ProxyConfig
import kotlin.system.exitProcess

fun main() {
    // The same variables as the lab's proxy; only the engine, the upstream and where to listen matter.
    val config = try {
        ProxyConfig.fromEnv(System.getenv() + ("CLIENT_LIFETIME" to "singleton"))
    } catch (e: ConfigException) {
        System.err.println("lean proxy: configuration error: ${e.message}")
        exitProcess(2)
    }
    ClientFactory.prepareJvm(config)
    val client = ClientFactory.create(config)
    val upstream = config.upstreamUrl
    embeddedServer(Netty, port = config.port, host = config.host) {
        routing {
            get("/health") { call.respondText("ok lean-${config.engine.id}\n") }
            get("{...}") {
                val response = client.get(upstream + call.request.uri)
                val type = response.headers[HttpHeaders.ContentType]?.let(ContentType::parse)
                call.respondBytes(response.readRawBytes(), type, response.status)
            }
        }
    }.start(wait = true)
}
