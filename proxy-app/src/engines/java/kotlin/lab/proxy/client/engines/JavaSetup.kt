/**
 * The JDK's `HttpClient`. It cannot limit connections in flight; its only knob is the size of
 * the idle keep-alive cache, a system property read once when its classes load. The HTTP version
 * is the one asked for (`CLIENT_HTTP_VERSION`, 1.1 by default): the engine defaults to HTTP/2, which
 * over cleartext sends an `h2c` upgrade. Over HTTP/2 the JDK uses one connection per upstream and
 * fails a request beyond the server's limit of concurrent streams (nginx: 128) instead of queuing
 * it (JDK-8225647). It sends
 * an idempotent request again once when its pooled connection was closed; that cannot be
 * turned off per client.
 */
package lab.proxy.client.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.java.Java
import lab.proxy.client.ClientPart
import lab.proxy.client.ClientThreads
import lab.proxy.client.EngineSetup
import lab.proxy.client.UpstreamTls
import lab.proxy.client.fair
import lab.proxy.client.labCommon
import lab.proxy.config.HttpVersion
import lab.proxy.config.ProxyConfig

object JavaSetup : EngineSetup {
    const val POOL_PROPERTY = "jdk.httpclient.connectionPoolSize"

    override fun prepareJvm(config: ProxyConfig) {
        if (config.fair) System.setProperty(POOL_PROPERTY, config.maxConnections.toString())
    }

    override fun create(config: ProxyConfig, parts: Set<ClientPart>): HttpClient = HttpClient(Java) {
        engine {
            // Ktor gives the JDK's client `executor(dispatcher.asExecutor())`: its tasks on virtual threads too.
            ClientThreads.engineDispatcher(config)?.let { dispatcher = it }
            // The engine's default, HTTP/2, sends an h2c upgrade over cleartext: the lab asks for what is set.
            if (ClientPart.ENGINE in parts || config.tls) protocolVersion = version(config)
            if (ClientPart.TIMEOUTS in parts) config { connectTimeout(java.time.Duration.ofMillis(config.connectTimeoutMs)) }
            UpstreamTls.of(config)?.let { tls ->
                config {
                    sslContext(tls.sslContext)
                    config.tlsVersion?.let { v -> sslParameters(tls.sslContext.defaultSSLParameters.apply { protocols = arrayOf(v.jsse) }) }
                }
            }
        }
        labCommon(config, parts)
    }

    private fun version(config: ProxyConfig): java.net.http.HttpClient.Version = when (config.httpVersion) {
        HttpVersion.HTTP_1_1 -> java.net.http.HttpClient.Version.HTTP_1_1
        HttpVersion.HTTP_2 -> java.net.http.HttpClient.Version.HTTP_2
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        val out = linkedMapOf(
            "max_connections_total" to "unlimited",
            "max_connections_per_route" to "unlimited",
        )
        if (config.fair) out["keep_alive_cache"] = config.maxConnections.toString()
        out["java_http_version"] = version(config).name
        out["retry_on_stale"] = "always" // idempotent requests, once: the JDK's own
        out["pool_metrics"] = "not exposed" // the JDK's HttpClient has no API for its connections
        return out
    }
}
