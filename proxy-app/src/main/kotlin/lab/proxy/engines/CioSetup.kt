/**
 * CIO, Ktor's coroutine engine. Without pipelining it opens a dedicated connection for every
 * request (`Endpoint.makeDedicatedRequest`), so there is no pooled connection to go stale and
 * nothing to retry; the lab keeps that default and shows its cost.
 */
package lab.proxy.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.cio.CIO
import io.ktor.client.engine.cio.CIOEngineConfig
import io.ktor.client.engine.cio.endpoint
import lab.proxy.ProxyConfig

object CioSetup : EngineSetup {
    override fun create(config: ProxyConfig): HttpClient = HttpClient(CIO) {
        engine { configure(config) }
        labCommon(config)
    }

    private fun CIOEngineConfig.configure(config: ProxyConfig) {
        if (!config.fair) return
        maxConnectionsCount = config.maxConnections
        requestTimeout = config.requestTimeoutMs
        endpoint {
            maxConnectionsPerRoute = config.maxConnections
            connectTimeout = config.connectTimeoutMs
            keepAliveTime = EngineSetup.KEEP_ALIVE_MS
        }
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        val cio = CIOEngineConfig().apply { configure(config) }
        return linkedMapOf(
            "max_connections_total" to cio.maxConnectionsCount.toString(),
            "max_connections_per_route" to cio.endpoint.maxConnectionsPerRoute.toString(),
            "keep_alive_ms" to cio.endpoint.keepAliveTime.toString(),
            "pipelining" to if (cio.pipelining) "on" else "off",
            "retry_on_stale" to "n/a", // no pooled connection without pipelining
        )
    }
}
