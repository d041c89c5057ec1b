/**
 * Apache HttpAsyncClient 4 (Ktor's deprecated `apache` engine). It has no retry of its own: a
 * pooled connection the upstream closed fails the request that picks it up.
 */
@file:Suppress("DEPRECATION") // ktor-client-apache (HttpClient 4) is deprecated, and under test

package lab.proxy.client.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache.Apache
import io.ktor.client.engine.apache.ApacheEngineConfig
import lab.proxy.client.ClientPart
import lab.proxy.client.EngineSetup
import lab.proxy.client.UpstreamTls
import lab.proxy.client.fair
import lab.proxy.client.labCommon
import lab.proxy.client.refuseHttp2
import lab.proxy.config.BuildInfo
import lab.proxy.config.ProxyConfig
import org.apache.http.nio.conn.ssl.SSLIOSessionStrategy
import org.apache.http.impl.nio.reactor.IOReactorConfig

object ApacheSetup : EngineSetup {
    /** ktor-client-apache's last release (ktor-releases.tsv; a test of the runner keeps them equal). */
    const val LAST_RELEASE = "3.4.1"

    /** What `lab_proxy_info` says of the engine: deprecated, and on which release. */
    val note: String
        get() = BuildInfo.ktorVersion.let { built ->
            if (built == LAST_RELEASE) "apache: Ktor $built, its last release; deprecated"
            else "apache: Ktor $built (its last release is $LAST_RELEASE); deprecated"
        }

    override fun create(config: ProxyConfig, parts: Set<ClientPart>): HttpClient = HttpClient(Apache) {
        engine { configure(config, parts) }
        labCommon(config, parts)
    }

    override fun refusal(config: ProxyConfig): String? =
        config.refuseHttp2("HttpAsyncClient 4 (Ktor's apache engine) has no HTTP/2")?.let { "$it, e.g. apache5" }

    private fun ApacheEngineConfig.configure(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL) {
        UpstreamTls.of(config)?.let { tls ->
            sslContext = tls.sslContext
            config.tlsVersion?.let { v ->
                customizeClient {
                    setSSLStrategy(SSLIOSessionStrategy(tls.sslContext, arrayOf(v.jsse), null, SSLIOSessionStrategy.getDefaultHostnameVerifier()))
                }
            }
        }
        if (ClientPart.TIMEOUTS in parts) {
            connectTimeout = config.connectTimeoutMs.toInt()
            // Its own socket timeout (10 s by default) never shorter than the proxy's; the engine's with CLIENT_LIMITS=defaults.
            if (config.fair) socketTimeout = config.requestTimeoutMs.toInt()
        }
        if (!config.fair) return
        customizeClient {
            if (ClientPart.LIMITS in parts) {
                setMaxConnTotal(config.maxConnections)
                setMaxConnPerRoute(config.maxConnections)
            }
            if (ClientPart.ENGINE in parts) {
                setDefaultIOReactorConfig(IOReactorConfig.custom().setIoThreadCount(EngineSetup.IO_THREADS).build())
            }
        }
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        if (!config.fair) {
            // Set inside Ktor's engine, not readable from its config.
            return linkedMapOf(
                "max_connections_total" to "engine_default",
                "max_connections_per_route" to "engine_default",
                "retry_on_stale" to "none", // the engine has no retry
                "pool_metrics" to "not exposed", // its connection manager is built inside Ktor's engine
                "engine_note" to note,
            )
        }
        val apache = ApacheEngineConfig().apply { configure(config) }
        return linkedMapOf(
            "max_connections_total" to config.maxConnections.toString(),
            "max_connections_per_route" to config.maxConnections.toString(),
            "socket_timeout_ms" to apache.socketTimeout.toString(),
            "io_threads" to EngineSetup.IO_THREADS.toString(),
            "retry_on_stale" to "none", // the engine has no retry
            "pool_metrics" to "not exposed", // its connection manager is built inside Ktor's engine
            "engine_note" to note,
        )
    }
}
