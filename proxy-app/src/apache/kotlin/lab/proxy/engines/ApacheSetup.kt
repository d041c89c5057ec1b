/**
 * Apache HttpAsyncClient 4 (Ktor's deprecated `apache` engine). It has no retry of its own: a
 * pooled connection the upstream closed fails the request that picks it up.
 */
@file:Suppress("DEPRECATION") // ktor-client-apache (HttpClient 4) is deprecated, and under test

package lab.proxy.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache.Apache
import io.ktor.client.engine.apache.ApacheEngineConfig
import lab.proxy.ProxyConfig
import org.apache.http.impl.nio.reactor.IOReactorConfig

object ApacheSetup : EngineSetup {
    override fun create(config: ProxyConfig): HttpClient = HttpClient(Apache) {
        engine { configure(config) }
        labCommon(config)
    }

    private fun ApacheEngineConfig.configure(config: ProxyConfig) {
        if (!config.fair) return
        connectTimeout = config.connectTimeoutMs.toInt()
        socketTimeout = config.requestTimeoutMs.toInt()
        customizeClient {
            setMaxConnTotal(config.maxConnections)
            setMaxConnPerRoute(config.maxConnections)
            setDefaultIOReactorConfig(IOReactorConfig.custom().setIoThreadCount(EngineSetup.IO_THREADS).build())
        }
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        if (!config.fair) {
            // Set inside Ktor's engine, not readable from its config.
            return linkedMapOf(
                "max_connections_total" to "engine_default",
                "max_connections_per_route" to "engine_default",
                "retry_on_stale" to "none", // the engine has no retry
            )
        }
        val apache = ApacheEngineConfig().apply { configure(config) }
        return linkedMapOf(
            "max_connections_total" to config.maxConnections.toString(),
            "max_connections_per_route" to config.maxConnections.toString(),
            "socket_timeout_ms" to apache.socketTimeout.toString(),
            "io_threads" to EngineSetup.IO_THREADS.toString(),
            "retry_on_stale" to "none", // the engine has no retry
        )
    }
}
