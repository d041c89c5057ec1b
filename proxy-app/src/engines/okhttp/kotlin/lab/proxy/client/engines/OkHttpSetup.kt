/**
 * OkHttp. Each client gets its own dispatcher and connection pool: the engine's default
 * dispatcher allows 5 requests per host, and its default pool is shared process-wide (closing
 * one per-call client would evict the idle connections of all others).
 */
package lab.proxy.client.engines

import io.ktor.client.HttpClient
import io.ktor.client.engine.okhttp.OkHttp
import lab.proxy.client.ClientPart
import lab.proxy.client.ClientThreads
import lab.proxy.client.ClientPools
import lab.proxy.client.EngineSetup
import lab.proxy.client.UpstreamTls
import lab.proxy.client.fair
import lab.proxy.client.labCommon
import lab.proxy.config.HttpVersion
import lab.proxy.config.ClientDispatcher
import lab.proxy.config.ProxyConfig
import lab.proxy.config.RetryOnStale
import lab.proxy.config.TlsVersion
import okhttp3.ConnectionPool
import okhttp3.ConnectionSpec
import okhttp3.Protocol
import okhttp3.Dispatcher
import okhttp3.OkHttpClient
import java.util.concurrent.TimeUnit

object OkHttpSetup : EngineSetup {
    override fun create(config: ProxyConfig, parts: Set<ClientPart>): HttpClient {
        val pool = ownPool(config, parts)
        val client = HttpClient(OkHttp) {
            engine {
                config { configure(this, config, parts, pool) }
                ClientThreads.engineDispatcher(config)?.let { dispatcher = it }
            }
            labCommon(config, parts)
        }
        // Its own pool, counted until the client closes (lab_client_pool_connections).
        return pool?.let { p ->
            ClientPools.track(client) {
                val idle = p.idleConnectionCount()
                ClientPools.Counts(p.connectionCount() - idle, idle)
            }
        } ?: client
    }

    /** The client's own pool with the lab's limits; null: OkHttp's default (shared process-wide by Ktor's prototype). */
    private fun ownPool(config: ProxyConfig, parts: Set<ClientPart>): ConnectionPool? =
        if (config.fair && ClientPart.ENGINE in parts) {
            ConnectionPool(config.maxConnections, EngineSetup.KEEP_ALIVE_MS, TimeUnit.MILLISECONDS)
        } else {
            null
        }

    /**
     * The dispatcher this client uses: the lab's limit, or OkHttp's own (64, 5 per host); its calls
     * on OkHttp's own thread pool, or on a virtual thread each (an executor per client: Ktor shuts a
     * client's down when it closes).
     */
    private fun dispatcher(config: ProxyConfig, parts: Set<ClientPart>): Dispatcher = (
        if (config.dispatcher == ClientDispatcher.Virtual) Dispatcher(ClientThreads.newVirtualThreadExecutor()) else Dispatcher()
        ).apply {
        if (config.fair && ClientPart.LIMITS in parts) {
            maxRequests = config.maxConnections
            maxRequestsPerHost = config.maxConnections
        }
    }

    private fun configure(
        builder: OkHttpClient.Builder,
        config: ProxyConfig,
        parts: Set<ClientPart> = ClientPart.ALL,
        pool: ConnectionPool? = ownPool(config, parts),
    ) {
        builder.dispatcher(dispatcher(config, parts))
        if (ClientPart.TIMEOUTS in parts) {
            builder.connectTimeout(config.connectTimeoutMs, TimeUnit.MILLISECONDS)
            if (config.fair) {
                // OkHttp's own read and write timeouts (10 s by default) never shorter than the proxy's.
                builder.readTimeout(config.requestTimeoutMs, TimeUnit.MILLISECONDS)
                builder.writeTimeout(config.requestTimeoutMs, TimeUnit.MILLISECONDS)
            }
        }
        UpstreamTls.of(config)?.let { tls ->
            builder.sslSocketFactory(tls.sslContext.socketFactory, tls.trustManager)
            // HTTP/2 is offered by ALPN beside HTTP/1.1 (OkHttp wants both); the proxy counts what was chosen.
            builder.protocols(
                if (config.httpVersion == HttpVersion.HTTP_2) listOf(Protocol.HTTP_2, Protocol.HTTP_1_1) else listOf(Protocol.HTTP_1_1),
            )
            config.tlsVersion?.let { v ->
                val version = if (v == TlsVersion.TLS_1_3) okhttp3.TlsVersion.TLS_1_3 else okhttp3.TlsVersion.TLS_1_2
                builder.connectionSpecs(listOf(ConnectionSpec.Builder(ConnectionSpec.MODERN_TLS).tlsVersions(version).build()))
            }
        }
        if (ClientPart.ENGINE !in parts) return
        pool?.let { builder.connectionPool(it) }
        // One-shot request bodies (Ktor's) are never sent twice: only a request whose body was
        // not started yet is retried on a new connection.
        if (config.retryOnStale != RetryOnStale.ENGINE) builder.retryOnConnectionFailure(config.retryOnStale == RetryOnStale.ON)
    }

    override fun settings(config: ProxyConfig): Map<String, String> {
        // Ktor's OkHttpConfig starts every builder with retryOnConnectionFailure(true).
        val built = OkHttpClient.Builder().retryOnConnectionFailure(true).also { configure(it, config) }.build()
        val out = linkedMapOf(
            "dispatcher_max_requests" to built.dispatcher.maxRequests.toString(),
            "dispatcher_max_requests_per_host" to built.dispatcher.maxRequestsPerHost.toString(),
        )
        if (config.fair) {
            out["max_connections_total"] = config.maxConnections.toString()
            out["max_connections_per_route"] = config.maxConnections.toString()
            out["pool_max_idle"] = config.maxConnections.toString()
            out["keep_alive_ms"] = EngineSetup.KEEP_ALIVE_MS.toString()
        }
        val retry = if (built.retryOnConnectionFailure) "on" else "off" // on: until the body starts
        out["retry_on_stale"] = if (config.retryOnStale == RetryOnStale.ENGINE) "engine:$retry" else retry
        out["pool_metrics"] = if (config.fair) "exposed" else "not exposed" // the default pool is Ktor's, unseen
        built.dispatcher.executorService.shutdown()
        return out
    }
}
