/**
 * CIO, Ktor's coroutine engine. Without pipelining it opens a dedicated connection for every
 * request (`Endpoint.makeDedicatedRequest`), so there is no pooled connection to go stale and
 * nothing to retry; the lab keeps that default and shows its cost. `CLIENT_PIPELINING=on` turns
 * pipelining on: GET and HEAD then share connections (and queue behind one another on them).
 */
package lab.proxy.client.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.cio.CIO
import io.ktor.client.engine.cio.CIOEngineConfig
import io.ktor.client.engine.cio.endpoint
import lab.proxy.client.ClientPart
import lab.proxy.client.ClientThreads
import lab.proxy.client.EngineSetup
import lab.proxy.client.UpstreamTls
import lab.proxy.client.fair
import lab.proxy.client.labCommon
import lab.proxy.client.refuseHttp2
import lab.proxy.client.refuseTls13
import lab.proxy.config.ProxyConfig

object CioSetup : EngineSetup {
    override fun create(config: ProxyConfig, parts: Set<ClientPart>): HttpClient = HttpClient(CIO) {
        engine {
            configure(config, parts)
            ClientThreads.engineDispatcher(config)?.let { dispatcher = it }
        }
        labCommon(config, parts)
    }

    override fun refusal(config: ProxyConfig): String? =
        config.refuseHttp2("Ktor's CIO client speaks HTTP/1.1 only (no ALPN, no HTTP/2)")
            ?: config.refuseTls13("Ktor's CIO TLS (ktor-network-tls) does TLS 1.2 at most")

    private fun CIOEngineConfig.configure(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL) {
        // Ktor's own TLS, not the JDK's: it takes the trust manager alone (TLS 1.2, no session resumption).
        UpstreamTls.of(config)?.let { tls -> https { trustManager = tls.trustManager } }
        pipelining = config.pipelining
        if (ClientPart.TIMEOUTS in parts) {
            // CIO's own request timer (a coroutine per request, 15 s by default) gives way to the proxy's watchdog.
            requestTimeout = 0
            endpoint { connectTimeout = config.connectTimeoutMs }
        }
        if (!config.fair) return
        if (ClientPart.LIMITS in parts) {
            maxConnectionsCount = config.maxConnections
            endpoint { maxConnectionsPerRoute = config.maxConnections }
        }
        if (ClientPart.ENGINE in parts) endpoint { keepAliveTime = EngineSetup.KEEP_ALIVE_MS }
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        val cio = CIOEngineConfig().apply { configure(config) }
        return linkedMapOf(
            "max_connections_total" to cio.maxConnectionsCount.toString(),
            "max_connections_per_route" to cio.endpoint.maxConnectionsPerRoute.toString(),
            // A kept connection's idle time applies only to pipelined ones: without pipelining none is kept.
            "keep_alive_ms" to if (cio.pipelining) cio.endpoint.keepAliveTime.toString() else "n/a",
            "cio_request_timeout_ms" to cio.requestTimeout.toString(), // 0: none of CIO's own
            "pipelining" to if (cio.pipelining) "on" else "off",
            // No pooled connection without pipelining; with it, CIO has no retry of its own.
            "retry_on_stale" to if (cio.pipelining) "none" else "n/a",
            "pool_metrics" to "not exposed", // CIO's endpoints and their connections are internal
        )
    }
}
