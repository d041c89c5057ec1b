/**
 * Apache HttpClient 5 (async). Its default retry strategy does not retry a connection the
 * upstream closed as it was reused (`ConnectionClosedException` is on its "never" list), and it
 * does send a request again when the upstream answers 429 or 503, which a proxy must pass on. The
 * lab's [StaleConnectionRetry] sends an idempotent request again once on a closed or reset
 * connection and never on a status; `CLIENT_RETRY_ON_STALE=off` disables retries.
 *
 * Its close: the lab's client closes its pooled connections itself before Ktor closes HttpClient 5
 * ([ClosePoolFirst]), which keeps HttpClient 5's I/O reactors from throwing a
 * `ConcurrentModificationException` at the end of a client's life (docs/proxy.md, "Apache5's close").
 */
package lab.proxy.client.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache5.Apache5
import io.ktor.client.engine.apache5.Apache5EngineConfig
import io.ktor.client.plugins.api.createClientPlugin
import lab.proxy.client.ClientPart
import lab.proxy.client.ClientPools
import lab.proxy.client.EngineSetup
import lab.proxy.client.UpstreamTls
import lab.proxy.client.fair
import lab.proxy.client.labCommon
import lab.proxy.config.HttpVersion
import lab.proxy.config.ProxyConfig
import lab.proxy.config.RetryOnStale
import lab.proxy.config.TlsVersion
import org.apache.hc.client5.http.config.TlsConfig
import org.apache.hc.client5.http.impl.async.HttpAsyncClientBuilder
import org.apache.hc.client5.http.impl.nio.PoolingAsyncClientConnectionManager
import org.apache.hc.core5.http.ssl.TLS
import org.apache.hc.core5.io.CloseMode
import org.apache.hc.core5.http2.HttpVersionPolicy
import org.apache.hc.client5.http.config.ConnectionConfig
import org.apache.hc.core5.reactor.IOReactorConfig
import org.apache.hc.client5.http.impl.DefaultHttpRequestRetryStrategy
import org.apache.hc.core5.util.TimeValue
import org.apache.hc.core5.util.Timeout
import org.apache.hc.core5.http.ConnectionClosedException
import org.apache.hc.core5.http.HttpRequest
import org.apache.hc.core5.http.NoHttpResponseException
import org.apache.hc.core5.http.protocol.HttpContext
import org.apache.hc.core5.http.protocol.HttpCoreContext
import java.io.IOException
import java.io.InterruptedIOException
import java.net.SocketException
import java.net.ConnectException
import java.net.NoRouteToHostException
import java.net.UnknownHostException
import javax.net.ssl.SSLException

object Apache5Setup : EngineSetup {
    override fun create(config: ProxyConfig, parts: Set<ClientPart>): HttpClient {
        val pool = ManagerPool()
        val client = HttpClient(Apache5) {
            engine { configure(config, parts, pool) }
            labCommon(config, parts)
            install(ClosePoolFirst) { this.pool = pool }
        }
        return if (MANAGER_FIELD != null) ClientPools.track(client, pool) else client
    }

    /**
     * The client's connection manager, once its engine has built it (at the first request: Ktor builds
     * HttpClient 5 lazily, and the manager inside it); in use is HttpClient 5's "leased", idle its "available".
     */
    private class ManagerPool : ClientPools.Pool {
        @Volatile
        var manager: PoolingAsyncClientConnectionManager? = null

        override fun counts(): ClientPools.Counts =
            manager?.totalStats?.let { ClientPools.Counts(it.leased, it.available) } ?: ClientPools.Counts(0, 0)

        /** Every connection of the pool closed now, from this thread, as HttpClient 5's own close does after its reactors'. */
        fun closeConnections() {
            manager?.close(CloseMode.IMMEDIATE)
        }
    }

    private class CloseOrder {
        var pool: ManagerPool? = null
    }

    /**
     * Ktor closes HttpClient 5 with `close(CloseMode.IMMEDIATE)` on the thread that closes the
     * `HttpClient` (Apache5Engine.close). HttpClient 5 first asks each I/O reactor to shut its
     * sessions down gracefully (a `ShutdownCommand` queued on every connection: each becomes
     * writable), then, without waiting, closes every reactor's selector from the calling thread
     * (httpcore5's AbstractSingleCoreIOReactor.close). A reactor still going through those
     * writable connections (SingleCoreIOReactor.processEvents, iterating the selector's selected
     * keys) sees the JDK remove them under it (SelectorImpl.implCloseSelector): it logs a
     * `ConcurrentModificationException` and stops, every connection already closed; no request
     * fails. The plain Ktor client does the same (about one run of two of engine-bench with 1000
     * connections open). Closing the pool's connections first, before Ktor's close (a plugin's
     * close runs before the engine's), leaves no session to shut down: the reactors have no
     * event to go through when their selectors close. Nothing else changes: Ktor's close does not
     * wait for requests in flight either (they are not children of the client's job), and
     * HttpClient 5 closes the same pool with the same IMMEDIATE mode right after its reactors.
     */
    private val ClosePoolFirst = createClientPlugin("LabApache5ClosePoolFirst", ::CloseOrder) {
        val pool = pluginConfig.pool
        onClose { pool?.closeConnections() }
    }

    /**
     * Ktor builds the manager inside its engine and hands it to the client builder before our
     * `customizeClient` runs; the builder keeps it in a private field, read here (null: this
     * HttpClient 5 has no such field, and the pool is not exposed).
     */
    private val MANAGER_FIELD = runCatching {
        HttpAsyncClientBuilder::class.java.getDeclaredField("connManager").apply { isAccessible = true }
    }.getOrNull()

    private fun Apache5EngineConfig.configure(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL, pool: ManagerPool? = null) {
        // One block: a second customizeClient would replace the first.
        customizeClient {
            if (ClientPart.ENGINE in parts) {
                when (config.retryOnStale) {
                    RetryOnStale.ON -> setRetryStrategy(StaleConnectionRetry)
                    RetryOnStale.OFF -> disableAutomaticRetries()
                    RetryOnStale.ENGINE -> Unit // HttpClient 5's default strategy
                }
                if (config.fair) setIOReactorConfig(IOReactorConfig.custom().setIoThreadCount(EngineSetup.IO_THREADS).build())
            }
            if (pool != null) pool.manager = MANAGER_FIELD?.get(this) as? PoolingAsyncClientConnectionManager
        }
        val tls = UpstreamTls.of(config)
        if (tls != null) sslContext = tls.sslContext
        val fair = config.fair
        val timeouts = ClientPart.TIMEOUTS in parts
        if (timeouts) {
            connectTimeout = config.connectTimeoutMs
            // Its own socket timeout (10 s in Ktor's default) never shorter than the proxy's; the engine's with CLIENT_LIMITS=defaults.
            if (fair) socketTimeout = config.requestTimeoutMs.toInt()
        }
        // One block: a second configureConnectionManager would replace the first.
        configureConnectionManager {
            if (tls != null) {
                // Without a policy HttpClient 5 negotiates HTTP/2 on its own over TLS: exactly what is
                // asked, or a failed handshake (FORCE_HTTP_2 offers only h2). With HTTP/2, requests in
                // flight share a connection (message multiplexing) instead of taking one each.
                val h2 = config.httpVersion == HttpVersion.HTTP_2
                setDefaultTlsConfig(
                    TlsConfig.custom()
                        .setVersionPolicy(if (h2) HttpVersionPolicy.FORCE_HTTP_2 else HttpVersionPolicy.FORCE_HTTP_1)
                        .apply { config.tlsVersion?.let { setSupportedProtocols(if (it == TlsVersion.TLS_1_3) TLS.V_1_3 else TLS.V_1_2) } }
                        .build(),
                )
                if (h2) setMessageMultiplexing(true)
            }
            if (!fair) return@configureConnectionManager
            if (ClientPart.LIMITS in parts) {
                setMaxConnTotal(config.maxConnections)
                setMaxConnPerRoute(config.maxConnections)
            }
            if (timeouts) {
                setDefaultConnectionConfig(
                    ConnectionConfig.custom()
                        .setConnectTimeout(Timeout.ofMilliseconds(config.connectTimeoutMs))
                        .setSocketTimeout(Timeout.ofMilliseconds(config.requestTimeoutMs))
                        .build(),
                )
            }
            // (without fair limits, the default ConnectionConfig takes connectTimeout and socketTimeout above)
        }
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        // on: idempotent requests once, on a closed connection too; engine: the default strategy.
        val retry = config.retryOnStale.id
        val poolMetrics = if (MANAGER_FIELD != null) "exposed" else "not exposed"
        if (!config.fair) {
            return linkedMapOf(
                "max_connections_total" to "engine_default",
                "max_connections_per_route" to "engine_default",
                "retry_on_stale" to retry,
                "pool_metrics" to poolMetrics,
            )
        }
        val apache5 = Apache5EngineConfig().apply { configure(config) }
        return linkedMapOf(
            "max_connections_total" to config.maxConnections.toString(),
            "max_connections_per_route" to config.maxConnections.toString(),
            "socket_timeout_ms" to apache5.socketTimeout.toString(),
            "io_threads" to EngineSetup.IO_THREADS.toString(),
            "retry_on_stale" to retry,
            "h2_multiplexing" to if (config.tls && config.httpVersion == HttpVersion.HTTP_2) "on" else "off",
            "pool_metrics" to poolMetrics,
        )
    }
}

/**
 * Idempotent requests once more when the upstream closed or reset a connection before answering
 * (a stale pooled connection); never once an answer has begun, and no status is retried. A
 * connection the client itself is closing ("Connection is closed": a per-call client shut down
 * after a timeout) is not retried: the retry would be scheduled on a stopped client.
 */
private object StaleConnectionRetry : DefaultHttpRequestRetryStrategy(
    1,
    TimeValue.ZERO_MILLISECONDS,
    listOf(
        InterruptedIOException::class.java,
        UnknownHostException::class.java,
        ConnectException::class.java,
        NoRouteToHostException::class.java,
        SSLException::class.java,
    ),
    emptyList(),
) {
    override fun retryRequest(request: HttpRequest, exception: IOException, execCount: Int, context: HttpContext): Boolean =
        !answered(context) && exception.meansStale() && super.retryRequest(request, exception, execCount, context)

    /**
     * Whether the upstream's answer had begun. HttpClient 5 would send the request again after a
     * reset in the middle of a body, while Ktor already holds the first answer's body: its
     * consumer is released without being failed, the caller's download stalls until a timeout
     * (30 s) and the upstream gets the request twice. A stale connection fails before any answer.
     */
    private fun answered(context: HttpContext): Boolean = HttpCoreContext.castOrCreate(context).response != null

    private fun IOException.meansStale(): Boolean = when (this) {
        is NoHttpResponseException -> true
        is ConnectionClosedException -> message?.contains("by peer") == true
        is SocketException -> message?.contains("reset", ignoreCase = true) == true
        else -> false
    }
}
