/**
 * The proxy's whole configuration, read once from the environment and validated here.
 *
 * Every variable, its valid values and its default are listed in [ProxyConfig.VARIABLES];
 * the README's table is the same list. A bad value is a [ConfigException] whose message
 * names the variable and what it accepts, so the process can stop at start.
 */
package lab.proxy

import java.net.URI

/** A setting's value by its name in the environment. */
interface Choice {
    val id: String
}

/** The entry whose [Choice.id] is [value], case-insensitively; null for anything else. */
fun <E : Choice> List<E>.byId(value: String): E? = firstOrNull { it.id == value.lowercase() }

/** The HTTP client engines under test. [id] is the value of `CLIENT_ENGINE`. */
enum class Engine(override val id: String) : Choice {
    CIO("cio"),
    APACHE("apache"),
    APACHE5("apache5"),
    OKHTTP("okhttp"),
    JAVA("java"),
}

/** How long one `HttpClient` lives. [id] is the value of `CLIENT_LIFETIME`. */
enum class Lifetime(override val id: String) : Choice {
    SINGLETON("singleton"),
    PER_CALL("per-call"),
}

/**
 * Which connection limits the client gets. [id] is the value of `CLIENT_LIMITS`.
 * `fair` applies `CLIENT_MAX_CONNECTIONS` to every engine; `defaults` leaves each engine's own
 * limits (CIO: 100 per route, OkHttp: 5 per host, ...), which is what earlier studies measured.
 */
enum class Limits(override val id: String) : Choice {
    FAIR("fair"),
    DEFAULTS("defaults"),
}

/**
 * Whether a request that failed on a pooled connection the upstream had already closed (after
 * a graceful reload, an idle timeout) is sent again on a new connection. [id] is the value of
 * `CLIENT_RETRY_ON_STALE`: `on` (idempotent requests, once), `off`, or `engine` (whatever the
 * engine does by itself, as earlier studies ran it). Applied to every engine that has the knob;
 * each engine's setup says what is in force.
 */
enum class RetryOnStale(override val id: String) : Choice {
    ON("on"),
    OFF("off"),
    ENGINE("engine"),
}

class ConfigException(message: String) : RuntimeException(message)

data class ProxyConfig(
    val engine: Engine = Engine.CIO,
    val lifetime: Lifetime = Lifetime.SINGLETON,
    /** Scheme, host, port and an optional path prefix; never ends with `/`. */
    val upstreamUrl: String = "http://nginx:80",
    /** Address to listen on: all interfaces in a container, 127.0.0.1 for the native runner. */
    val host: String = "0.0.0.0",
    val port: Int = 8080,
    val maxConnections: Int = 1000,
    val connectTimeoutMs: Long = 5_000,
    val requestTimeoutMs: Long = 30_000,
    val accessLog: Boolean = false,
    val limits: Limits = Limits.FAIR,
    val retryOnStale: RetryOnStale = RetryOnStale.ON,
    /** Once a request's first byte arrived, its headers must be complete within this. */
    val headerTimeoutMs: Long = 10_000,
    /** A connection with no request in progress is closed after this. */
    val idleTimeoutMs: Long = 60_000,
) {
    /** The case name used in compose overlays and reports, e.g. `per-call-okhttp`. */
    val caseName: String get() = "${lifetime.id}-${engine.id}"

    companion object {
        /** Variable name to a one-line description of what it accepts (for errors and docs). */
        val VARIABLES: Map<String, String> = linkedMapOf(
            "CLIENT_ENGINE" to Engine.entries.joinToString(", ") { it.id },
            "CLIENT_LIFETIME" to Lifetime.entries.joinToString(", ") { it.id },
            "UPSTREAM_URL" to "an http:// URL with a port from 1 to 65535 (or none) and no query or fragment, " +
                "e.g. http://nginx:80",
            "HOST" to "an IP address or host name to listen on, e.g. 0.0.0.0 or 127.0.0.1",
            "PORT" to "an integer from 1 to 65535",
            "CLIENT_MAX_CONNECTIONS" to "an integer from 1 to 100000",
            "CLIENT_LIMITS" to Limits.entries.joinToString(", ") { it.id },
            "CLIENT_CONNECT_TIMEOUT_MS" to "an integer from 1 to 3600000",
            "CLIENT_REQUEST_TIMEOUT_MS" to "an integer from 1 to 3600000",
            "ACCESS_LOG" to "on, off",
            "CLIENT_RETRY_ON_STALE" to RetryOnStale.entries.joinToString(", ") { it.id },
            "SERVER_HEADER_TIMEOUT_MS" to "an integer from 100 to 3600000",
            "SERVER_IDLE_TIMEOUT_MS" to "an integer from 100 to 3600000",
        )

        /** Reads [env] (normally `System.getenv()`); unset or blank variables take the default. */
        fun fromEnv(env: Map<String, String>): ProxyConfig {
            val defaults = ProxyConfig()
            fun value(name: String): String? = env[name]?.trim()?.takeIf { it.isNotEmpty() }

            return ProxyConfig(
                engine = value("CLIENT_ENGINE")?.let { v ->
                    Engine.entries.byId(v) ?: fail("CLIENT_ENGINE", v)
                } ?: defaults.engine,
                lifetime = value("CLIENT_LIFETIME")?.let { v ->
                    Lifetime.entries.byId(v) ?: fail("CLIENT_LIFETIME", v)
                } ?: defaults.lifetime,
                upstreamUrl = value("UPSTREAM_URL")?.let { parseUpstream(it) } ?: defaults.upstreamUrl,
                host = value("HOST")?.also { v ->
                    if (v.any { it.isWhitespace() || it == '/' }) fail("HOST", v)
                } ?: defaults.host,
                port = value("PORT")?.let { intIn("PORT", it, 1..65535) } ?: defaults.port,
                maxConnections = value("CLIENT_MAX_CONNECTIONS")
                    ?.let { intIn("CLIENT_MAX_CONNECTIONS", it, 1..100_000) } ?: defaults.maxConnections,
                limits = value("CLIENT_LIMITS")?.let { v ->
                    Limits.entries.byId(v) ?: fail("CLIENT_LIMITS", v)
                } ?: defaults.limits,
                connectTimeoutMs = value("CLIENT_CONNECT_TIMEOUT_MS")
                    ?.let { intIn("CLIENT_CONNECT_TIMEOUT_MS", it, 1..3_600_000).toLong() }
                    ?: defaults.connectTimeoutMs,
                requestTimeoutMs = value("CLIENT_REQUEST_TIMEOUT_MS")
                    ?.let { intIn("CLIENT_REQUEST_TIMEOUT_MS", it, 1..3_600_000).toLong() }
                    ?: defaults.requestTimeoutMs,
                accessLog = value("ACCESS_LOG")?.let { v ->
                    when (v.lowercase()) {
                        "on" -> true
                        "off" -> false
                        else -> fail("ACCESS_LOG", v)
                    }
                } ?: defaults.accessLog,
                retryOnStale = value("CLIENT_RETRY_ON_STALE")?.let { v ->
                    RetryOnStale.entries.byId(v) ?: fail("CLIENT_RETRY_ON_STALE", v)
                } ?: defaults.retryOnStale,
                headerTimeoutMs = value("SERVER_HEADER_TIMEOUT_MS")
                    ?.let { intIn("SERVER_HEADER_TIMEOUT_MS", it, 100..3_600_000).toLong() }
                    ?: defaults.headerTimeoutMs,
                idleTimeoutMs = value("SERVER_IDLE_TIMEOUT_MS")
                    ?.let { intIn("SERVER_IDLE_TIMEOUT_MS", it, 100..3_600_000).toLong() }
                    ?: defaults.idleTimeoutMs,
            )
        }

        private fun fail(name: String, value: String): Nothing =
            throw ConfigException("$name='$value' is not valid; valid values: ${VARIABLES.getValue(name)}")

        private fun intIn(name: String, value: String, range: IntRange): Int =
            value.toIntOrNull()?.takeIf { it in range } ?: fail(name, value)

        private fun parseUpstream(value: String): String {
            val uri = runCatching { URI(value) }.getOrNull() ?: fail("UPSTREAM_URL", value)
            val ok = uri.scheme?.lowercase() == "http" && !uri.host.isNullOrEmpty() &&
                (uri.port == -1 || uri.port in 1..65535) &&
                uri.rawQuery == null && uri.rawFragment == null && uri.rawUserInfo == null
            if (!ok) fail("UPSTREAM_URL", value)
            return value.trimEnd('/')
        }
    }
}
