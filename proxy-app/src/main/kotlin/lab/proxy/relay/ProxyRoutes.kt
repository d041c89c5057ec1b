/**
 * The proxy's own endpoints (`/health`, `/metrics`), then everything else forwarded.
 *
 * The own endpoints answer however the target is written: an absolute-form
 * `GET http://any/metrics` is the proxy's `/metrics`, never forwarded.
 */
package lab.proxy.relay

import io.ktor.http.ContentType
import io.ktor.server.application.Application
import io.ktor.server.application.ApplicationCall
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.route
import io.ktor.server.routing.routing
import lab.proxy.client.ClientProvider
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.ProxyMetrics

fun Application.configureRouting(config: ProxyConfig, clients: ClientProvider, metrics: ProxyMetrics) {
    val own = OwnEndpoints(config, metrics)
    val forwarder = Forwarder(config, clients, metrics, own)
    routing {
        get(OwnEndpoints.HEALTH) { own.respond(call, OwnEndpoints.HEALTH) }
        get(OwnEndpoints.METRICS) { own.respond(call, OwnEndpoints.METRICS) }
        route("{...}") {
            handle { forwarder.forward(call) }
        }
    }
}

class OwnEndpoints(private val config: ProxyConfig, private val metrics: ProxyMetrics) {
    /** True when [pathAndQuery] names one of the proxy's own endpoints. */
    fun serves(pathAndQuery: String): Boolean = pathAndQuery.substringBefore('?').let { it == HEALTH || it == METRICS }

    suspend fun respond(call: ApplicationCall, pathAndQuery: String) = when (pathAndQuery.substringBefore('?')) {
        HEALTH -> call.respondText("ok ${config.caseName}\n")
        else -> call.respondText(metrics.scrape(), PROMETHEUS_TEXT)
    }

    companion object {
        const val HEALTH = "/health"
        const val METRICS = "/metrics"
        private val PROMETHEUS_TEXT = ContentType.parse("text/plain; version=0.0.4; charset=utf-8")
    }
}
