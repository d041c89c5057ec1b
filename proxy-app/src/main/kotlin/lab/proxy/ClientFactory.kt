/**
 * Builds the `HttpClient` under test, with the same limits applied to every engine.
 *
 * Engine defaults differ wildly (CIO: 100 connections per route; OkHttp: 5 requests per
 * host; Apache: 10 s socket timeout; Java: HTTP/2 upgrade attempts over cleartext), and
 * earlier studies measured those defaults instead of the engines. Here one
 * `CLIENT_MAX_CONNECTIONS` and one pair of timeouts are set on each engine's own knobs;
 * [effectiveSettings] lists exactly what was set, for the start-up log and the info metric.
 * `CLIENT_LIMITS=defaults` leaves the engine's limits alone, to replay those studies.
 */
@file:Suppress("DEPRECATION") // ktor-client-apache (HttpClient 4) is deprecated, and under test

package lab.proxy

import io.ktor.client.HttpClient
import io.ktor.client.HttpClientConfig
import io.ktor.client.engine.apache.Apache
import io.ktor.client.engine.apache5.Apache5
import io.ktor.client.engine.cio.CIO
import io.ktor.client.engine.cio.endpoint
import io.ktor.client.engine.java.Java
import io.ktor.client.engine.okhttp.OkHttp
import io.ktor.client.plugins.HttpTimeout
import okhttp3.ConnectionPool
import okhttp3.Dispatcher
import org.apache.hc.core5.util.Timeout
import java.util.concurrent.TimeUnit

object ClientFactory {
    /** Idle keep-alive for pooled connections, the same for every engine that lets us set it. */
    const val KEEP_ALIVE_MS = 5_000L

    /**
     * The JDK's HTTP client has no limit on connections in flight; its only knob is the size of
     * the idle keep-alive cache, a system property read once when the client classes load.
     */
    const val JAVA_POOL_PROPERTY = "jdk.httpclient.connectionPoolSize"

    /** Call once at start-up, before any Java engine client exists. */
    fun prepareJvm(config: ProxyConfig) {
        if (config.engine == Engine.JAVA && config.limits == Limits.FAIR) {
            System.setProperty(JAVA_POOL_PROPERTY, config.maxConnections.toString())
        }
    }

    fun create(config: ProxyConfig): HttpClient =
        if (config.limits == Limits.DEFAULTS) createWithEngineDefaults(config) else createFair(config)

    /** Only what every case shares (timeouts, no redirects, HTTP/1.1); the engine's own limits stay. */
    private fun createWithEngineDefaults(config: ProxyConfig): HttpClient = when (config.engine) {
        Engine.CIO -> HttpClient(CIO) { common(config) }
        Engine.APACHE -> HttpClient(Apache) { common(config) }
        Engine.APACHE5 -> HttpClient(Apache5) { common(config) }
        Engine.OKHTTP -> HttpClient(OkHttp) { common(config) }
        Engine.JAVA -> HttpClient(Java) {
            engine { protocolVersion = java.net.http.HttpClient.Version.HTTP_1_1 }
            common(config)
        }
    }

    private fun createFair(config: ProxyConfig): HttpClient {
        val max = config.maxConnections
        val connectMs = config.connectTimeoutMs
        val requestMs = config.requestTimeoutMs
        return when (config.engine) {
            Engine.CIO -> HttpClient(CIO) {
                engine {
                    maxConnectionsCount = max
                    requestTimeout = requestMs
                    endpoint {
                        maxConnectionsPerRoute = max
                        connectTimeout = connectMs
                        keepAliveTime = KEEP_ALIVE_MS
                    }
                }
                common(config)
            }

            Engine.APACHE -> HttpClient(Apache) {
                engine {
                    connectTimeout = connectMs.toInt()
                    socketTimeout = requestMs.toInt()
                    customizeClient {
                        setMaxConnTotal(max)
                        setMaxConnPerRoute(max)
                    }
                }
                common(config)
            }

            Engine.APACHE5 -> HttpClient(Apache5) {
                engine {
                    connectTimeout = connectMs
                    socketTimeout = requestMs.toInt()
                    configureConnectionManager {
                        setMaxConnTotal(max)
                        setMaxConnPerRoute(max)
                        setDefaultConnectionConfig(
                            org.apache.hc.client5.http.config.ConnectionConfig.custom()
                                .setConnectTimeout(Timeout.ofMilliseconds(connectMs))
                                .setSocketTimeout(Timeout.ofMilliseconds(requestMs))
                                .build(),
                        )
                    }
                }
                common(config)
            }

            Engine.OKHTTP -> HttpClient(OkHttp) {
                engine {
                    config {
                        // Its own dispatcher and pool: the engine's default dispatcher allows
                        // 5 requests per host, and its default pool is shared process-wide.
                        dispatcher(Dispatcher().apply {
                            maxRequests = max
                            maxRequestsPerHost = max
                        })
                        connectionPool(ConnectionPool(max, KEEP_ALIVE_MS, TimeUnit.MILLISECONDS))
                        retryOnConnectionFailure(false)
                    }
                }
                common(config)
            }

            Engine.JAVA -> HttpClient(Java) {
                engine {
                    protocolVersion = java.net.http.HttpClient.Version.HTTP_1_1
                }
                common(config)
            }
        }
    }

    /** Settings shared by every engine: the same timeouts, no redirects followed, no retries. */
    private fun HttpClientConfig<*>.common(config: ProxyConfig) {
        followRedirects = false
        expectSuccess = false
        // The default transformers add "Accept-Charset: UTF-8" to every request; a proxy
        // adds no headers of its own, and the raw body channel needs no transformer.
        useDefaultTransformers = false
        install(HttpTimeout) {
            connectTimeoutMillis = config.connectTimeoutMs
            requestTimeoutMillis = config.requestTimeoutMs
        }
    }

    /** What [create] sets on the chosen engine, as names and values for logs and metrics. */
    fun effectiveSettings(config: ProxyConfig): Map<String, String> {
        val max = config.maxConnections.toString()
        val common = linkedMapOf(
            "limits" to config.limits.id,
            "connect_timeout_ms" to config.connectTimeoutMs.toString(),
            "request_timeout_ms" to config.requestTimeoutMs.toString(),
            "follow_redirects" to "false",
        )
        if (config.limits == Limits.DEFAULTS) return engineDefaults(config.engine) + common
        val specific: Map<String, String> = when (config.engine) {
            Engine.CIO -> linkedMapOf(
                "max_connections_total" to max,
                "max_connections_per_route" to max,
                "keep_alive_ms" to KEEP_ALIVE_MS.toString(),
                "pipelining" to "off",
            )

            Engine.APACHE, Engine.APACHE5 -> linkedMapOf(
                "max_connections_total" to max,
                "max_connections_per_route" to max,
                "socket_timeout_ms" to config.requestTimeoutMs.toString(),
                "io_threads" to "4",
            )

            Engine.OKHTTP -> linkedMapOf(
                "max_connections_total" to max,
                "max_connections_per_route" to max,
                "dispatcher_max_requests" to max,
                "dispatcher_max_requests_per_host" to max,
                "pool_max_idle" to max,
                "keep_alive_ms" to KEEP_ALIVE_MS.toString(),
                "retry_on_connection_failure" to "false",
            )

            Engine.JAVA -> linkedMapOf(
                "max_connections_total" to "unlimited",
                "max_connections_per_route" to "unlimited",
                "keep_alive_cache" to max,
                "http_version" to "HTTP_1_1",
            )
        }
        return linkedMapOf("max_connections" to max) + specific + common
    }

    /**
     * The limits each engine applies when nothing is set, read from the engines' own config
     * objects where they expose them (the Apache engines set theirs inside Ktor, not readable).
     */
    private fun engineDefaults(engine: Engine): Map<String, String> {
        val unset = "engine_default"
        return when (engine) {
            Engine.CIO -> {
                val cio = io.ktor.client.engine.cio.CIOEngineConfig()
                linkedMapOf(
                    "max_connections_total" to cio.maxConnectionsCount.toString(),
                    "max_connections_per_route" to cio.endpoint.maxConnectionsPerRoute.toString(),
                )
            }

            Engine.OKHTTP -> {
                val dispatcher = Dispatcher()
                linkedMapOf(
                    "dispatcher_max_requests" to dispatcher.maxRequests.toString(),
                    "dispatcher_max_requests_per_host" to dispatcher.maxRequestsPerHost.toString(),
                )
            }

            Engine.APACHE, Engine.APACHE5 -> linkedMapOf(
                "max_connections_total" to unset,
                "max_connections_per_route" to unset,
            )

            Engine.JAVA -> linkedMapOf(
                "max_connections_total" to "unlimited",
                "max_connections_per_route" to "unlimited",
                "http_version" to "HTTP_1_1",
            )
        }
    }
}
