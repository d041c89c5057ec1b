/**
 * The JDK's `HttpClient`. It cannot limit connections in flight; its only knob is the size of
 * the idle keep-alive cache, a system property read once when its classes load. HTTP/1.1 is
 * forced: the engine defaults to HTTP/2, which over cleartext sends an `h2c` upgrade. It sends
 * an idempotent request again once when its pooled connection was closed; that cannot be
 * turned off per client.
 */
package lab.proxy.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.java.Java
import lab.proxy.ProxyConfig

object JavaSetup : EngineSetup {
    const val POOL_PROPERTY = "jdk.httpclient.connectionPoolSize"

    override fun prepareJvm(config: ProxyConfig) {
        if (config.fair) System.setProperty(POOL_PROPERTY, config.maxConnections.toString())
    }

    override fun create(config: ProxyConfig): HttpClient = HttpClient(Java) {
        engine { protocolVersion = java.net.http.HttpClient.Version.HTTP_1_1 }
        labCommon(config)
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        val out = linkedMapOf(
            "max_connections_total" to "unlimited",
            "max_connections_per_route" to "unlimited",
        )
        if (config.fair) out["keep_alive_cache"] = config.maxConnections.toString()
        out["http_version"] = "HTTP_1_1"
        out["retry_on_stale"] = "always" // idempotent requests, once: the JDK's own
        return out
    }
}
