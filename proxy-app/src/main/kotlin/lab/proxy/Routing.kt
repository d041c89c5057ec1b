/**
 * The proxy's own endpoints (`/health`, `/metrics`), then everything else forwarded.
 */
package lab.proxy

import io.ktor.http.ContentType
import io.ktor.server.application.Application
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.routing

fun Application.configureRouting(config: ProxyConfig, clients: ClientProvider, metrics: ProxyMetrics) {
    routing {
        get("/health") { call.respondText("ok ${config.caseName}\n") }
        get("/metrics") {
            call.respondText(metrics.scrape(), ContentType.parse("text/plain; version=0.0.4; charset=utf-8"))
        }
        proxyRoutes(config, clients, metrics)
    }
}
