/**
 * The references the lab's proxy is measured against in `lab bench`: the simplest Ktor proxy a
 * user would write, one singleton client, no plugins, no metrics, no checks; and the rungs of the
 * ladder from it up to the lab's proxy (`lab bench --ladder`).
 *
 * The client (`LEAN_CLIENT`):
 * - `plain-limits` (the default): the plainest client code, with only the lab's connection limit
 *   ([PlainClients], written without the lab's code, so the lab's setup cannot hide in it);
 * - `plain`: the same with the engine's defaults;
 * - `lab`: the lab's own client ([ClientFactory]), with only the parts in `LEAN_PARTS` (all by default).
 *
 * The body (`LEAN_BODY`):
 * - `whole` (the default): `client.get(upstream + uri)`, `call.respondBytes(...)`. Ktor reads every
 *   body into memory first: the cheapest path, and no use for a 100 MB body.
 * - `streamed`: `client.prepareGet(...).execute { }` and `call.respondBytesWriter { }` copying the
 *   upstream's body as it arrives: what a proxy must do to pass a large body with flat memory.
 *
 * The lab's server side, piece by piece (`LEAN_SERVER`, comma-separated, none by default):
 * `metrics` (the lab's Micrometer registry and meters), `guards` (its connection guards and codec),
 * `forwarder` (its forwarding: request checks, headers both ways, the checked relay of bodies, in
 * place of the lean route). With all three and `LEAN_CLIENT=lab` it is the lab's proxy but for
 * its `/metrics` route and access log.
 *
 * CLIENT_ENGINE=okhttp UPSTREAM_URL=http://127.0.0.1:18080 PORT=18091 java -jar bench/lean-proxy/target/lean-proxy.jar
 */
package lab.lean

import io.ktor.client.HttpClient
import io.ktor.client.request.get
import io.ktor.client.request.prepareGet
import io.ktor.client.statement.bodyAsChannel
import io.ktor.client.statement.readRawBytes
import io.ktor.http.contentLength
import io.ktor.http.contentType
import io.ktor.server.application.Application
import io.ktor.server.engine.connector
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import io.ktor.server.request.uri
import io.ktor.server.response.respondBytes
import io.ktor.server.response.respondBytesWriter
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.route
import io.ktor.server.routing.routing
import io.ktor.utils.io.copyTo
import lab.plain.PlainClients
import lab.plain.PlainForm
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientPart
import lab.proxy.client.ClientProvider
import lab.proxy.config.ConfigException
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.ProxyMetrics
import lab.proxy.metrics.configureMetrics
import lab.proxy.relay.Forwarder
import lab.proxy.relay.OwnEndpoints
import lab.proxy.server.ServerCodec
import lab.proxy.server.ServerGuards
import kotlin.system.exitProcess

/** How the lean proxy takes the upstream's body: read whole, or streamed to the caller. */
enum class LeanBody { WHOLE, STREAMED }

/** The lab's server-side pieces a rung of the ladder adds. */
enum class LeanServer(val id: String) { METRICS("metrics"), GUARDS("guards"), FORWARDER("forwarder") }

/** Everything the lean proxy reads from its environment besides the lab proxy's own variables. */
data class LeanOptions(
    val body: LeanBody = LeanBody.WHOLE,
    /** `plain`, `plain-limits` or `lab`. */
    val client: String = PlainForm.LIMITS.id,
    val parts: Set<ClientPart> = ClientPart.ALL,
    val server: Set<LeanServer> = emptySet(),
) {
    /** The name `/health` answers with, e.g. `lean-streamed-okhttp`. */
    fun name(engine: String): String = buildString {
        append("lean")
        if (body == LeanBody.STREAMED) append("-streamed")
        append("-").append(engine)
    }

    companion object {
        /** A value it does not know is a configuration error naming the variable. */
        fun fromEnv(env: Map<String, String>): LeanOptions {
            fun value(name: String) = env[name]?.trim().orEmpty()
            val body = value("LEAN_BODY").ifEmpty { "whole" }.let { v ->
                LeanBody.entries.firstOrNull { it.name.equals(v, ignoreCase = true) }
                    ?: throw ConfigException("LEAN_BODY='$v' is not one of whole, streamed")
            }
            val client = value("LEAN_CLIENT").ifEmpty { PlainForm.LIMITS.id }
            if (client != "lab" && PlainForm.of(client) == null) {
                throw ConfigException("LEAN_CLIENT='$client' is not one of plain, plain-limits, lab")
            }
            val parts = value("LEAN_PARTS").ifEmpty { "all" }.let { v ->
                try {
                    ClientPart.parse(v)
                } catch (e: ConfigException) {
                    throw ConfigException("LEAN_PARTS='$v': ${e.message}")
                }
            }
            val server = value("LEAN_SERVER").split(",").map { it.trim() }.filter { it.isNotEmpty() }.map { v ->
                LeanServer.entries.firstOrNull { it.id == v }
                    ?: throw ConfigException("LEAN_SERVER='$v' is not one of ${LeanServer.entries.joinToString(", ") { it.id }}")
            }.toSet()
            return LeanOptions(body, client, parts, server)
        }
    }
}

/** `LEAN_BODY` as given (unset: whole); a value it does not know is a configuration error. */
fun leanBody(env: Map<String, String>): LeanBody = LeanOptions.fromEnv(env).body

fun main() {
    val env = System.getenv()
    // The same variables as the lab's proxy; only the engine, the upstream and where to listen matter.
    val (config, options) = try {
        ProxyConfig.fromEnv(env + ("CLIENT_LIFETIME" to "singleton")) to LeanOptions.fromEnv(env)
    } catch (e: ConfigException) {
        System.err.println("lean proxy: configuration error: ${e.message}")
        exitProcess(2)
    }
    val client = when (val plain = PlainForm.of(options.client)) {
        null -> {
            ClientFactory.prepareJvm(config)
            ClientFactory.create(config, options.parts)
        }
        else -> PlainClients.create(config.engine.id, plain, config.maxConnections)
    }
    val guards = LeanServer.GUARDS in options.server
    embeddedServer(Netty, configure = {
        connector {
            host = config.host
            port = config.port
        }
        if (guards) {
            channelPipelineConfig = { ServerGuards.install(this, config) }
            httpServerCodec = { ServerCodec.create(maxInitialLineLength, maxHeaderSize, maxChunkSize) }
        }
    }) {
        lean(config, options, client)
    }.start(wait = true)
}

fun Application.lean(config: ProxyConfig, options: LeanOptions, client: HttpClient) {
    val name = options.name(config.engine.id)
    val upstream = config.upstreamUrl
    val metrics = if (LeanServer.METRICS in options.server) ProxyMetrics(config).also { configureMetrics(it) } else null
    val forwarder = if (LeanServer.FORWARDER in options.server) {
        val m = metrics ?: ProxyMetrics(config)
        Forwarder(config, ClientProvider.Singleton({ client }, m.counters), m, OwnEndpoints(config, m))
    } else {
        null
    }
    routing {
        get("/health") { call.respondText("ok $name\n") }
        when {
            forwarder != null -> route("{...}") { handle { forwarder.forward(call) } }
            options.body == LeanBody.WHOLE -> get("{...}") {
                val response = client.get(upstream + call.request.uri)
                call.respondBytes(response.readRawBytes(), response.contentType(), response.status)
            }
            else -> get("{...}") {
                client.prepareGet(upstream + call.request.uri).execute { response ->
                    call.respondBytesWriter(response.contentType(), response.status, response.contentLength()) {
                        response.bodyAsChannel().copyTo(this)
                    }
                }
            }
        }
    }
}
