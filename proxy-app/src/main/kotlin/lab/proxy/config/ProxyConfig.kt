/**
 * The proxy's whole configuration, read once from the environment and validated here.
 *
 * Every variable is declared once, in [ProxyConfig.Companion]: its name, what it accepts (the text
 * of its error and of [ProxyConfig.VARIABLES], the docs' table) and how it is read, so the two
 * cannot drift apart. A bad value is a [ConfigException] whose message names the variable and what
 * it accepts, so the process can stop at start.
 */
package lab.proxy.config

import java.net.URI

/** A setting's value by its name in the environment. */
interface Choice {
    val id: String
}

/** The entry whose [Choice.id] is [value], case-insensitively; null for anything else. */
fun <E : Choice> List<E>.byId(value: String): E? = firstOrNull { it.id == value.lowercase() }

/** The HTTP client engines under test. [id] is the value of `CLIENT_ENGINE`. */
enum class Engine(override val id: String, val setupName: String) : Choice {
    CIO("cio", "CioSetup"),
    APACHE("apache", "ApacheSetup"),
    APACHE5("apache5", "Apache5Setup"),
    OKHTTP("okhttp", "OkHttpSetup"),
    JAVA("java", "JavaSetup"),
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

/** The HTTP version the client asks the upstream for. [id] is the value of `CLIENT_HTTP_VERSION`. */
enum class HttpVersion(override val id: String, val wire: String) : Choice {
    HTTP_1_1("1.1", "HTTP/1.1"),

    /** Over TLS only, chosen by ALPN (`h2`); the proxy has no cleartext HTTP/2 (`h2c`). */
    HTTP_2("2", "HTTP/2.0"),
}

/** The TLS version the client is limited to. [id] is the value of `CLIENT_TLS_VERSION`; unset: the engine's own range. */
enum class TlsVersion(override val id: String, val jsse: String) : Choice {
    TLS_1_2("1.2", "TLSv1.2"),
    TLS_1_3("1.3", "TLSv1.3"),
}

/**
 * Where the client's coroutines and blocking calls run. [id] is the value of `CLIENT_DISPATCHER`:
 * `io` (Ktor's default, `Dispatchers.IO`: 64 threads), `io:N` (that pool raised to N threads, by
 * `kotlinx.coroutines.io.parallelism` before it is first used), or `virtual` (a virtual thread per
 * task, JDK 21 and later).
 */
sealed class ClientDispatcher(val id: String) {
    data object Io : ClientDispatcher("io")

    data class IoPool(val threads: Int) : ClientDispatcher("io:$threads")

    data object Virtual : ClientDispatcher("virtual")

    override fun toString(): String = id

    companion object {
        const val ACCEPTS = "io, io:N (N threads, 1-4096), virtual"

        fun parse(value: String): ClientDispatcher? = when {
            value.lowercase() == "io" -> Io
            value.lowercase() == "virtual" -> Virtual
            value.lowercase().startsWith("io:") -> value.substring(3).toIntOrNull()?.takeIf { it in 1..4096 }?.let(::IoPool)
            else -> null
        }
    }
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
    /** The only CA the client trusts for an https upstream (a PEM file); null for http. */
    val upstreamCaFile: String? = null,
    val httpVersion: HttpVersion = HttpVersion.HTTP_1_1,
    /** Null: the engine's own range of TLS versions. */
    val tlsVersion: TlsVersion? = null,
    /** CIO only: requests share connections (GET and HEAD) instead of one dedicated connection each. */
    val pipelining: Boolean = false,
    /**
     * The network the lab put between the proxy and the upstream (Toxiproxy: `docs/network.md`). The
     * proxy does not apply it; it shows it in `lab_network_info`, beside `lab_proxy_info`.
     */
    val network: UpstreamNetwork = UpstreamNetwork(),
    val dispatcher: ClientDispatcher = ClientDispatcher.Io,
) {
    /** The case name used in compose overlays and reports, e.g. `per-call-okhttp`. */
    val caseName: String get() = "${lifetime.id}-${engine.id}"

    /** `http` or `https`. */
    val scheme: String get() = upstreamUrl.substringBefore("://").lowercase()

    val tls: Boolean get() = scheme == "https"

    /** One environment variable: its name, what it accepts, and how a non-blank value is read (null: not valid). */
    class Variable<T : Any>(val name: String, val accepts: String, private val parse: (String) -> T?) {
        /** The value in [env], or null when unset or blank; a [ConfigException] when not valid. */
        fun read(env: Map<String, String>): T? {
            val value = env[name]?.trim()?.takeIf { it.isNotEmpty() } ?: return null
            return parse(value) ?: throw ConfigException("$name='$value' is not valid; valid values: $accepts")
        }
    }

    companion object {
        private fun <E : Choice> choice(name: String, entries: List<E>) =
            Variable(name, entries.joinToString(", ") { it.id }) { entries.byId(it) }

        private fun int(name: String, range: IntRange) =
            Variable(name, "an integer from ${range.first} to ${range.last}") { v -> v.toIntOrNull()?.takeIf { it in range } }

        private fun onOff(name: String) = Variable(name, "on, off") {
            when (it.lowercase()) {
                "on" -> true
                "off" -> false
                else -> null
            }
        }

        val ENGINE = choice("CLIENT_ENGINE", Engine.entries)
        val LIFETIME = choice("CLIENT_LIFETIME", Lifetime.entries)
        val UPSTREAM_URL = Variable(
            "UPSTREAM_URL",
            "an http:// or https:// URL with a port from 1 to 65535 (or none) and no query or fragment, e.g. http://nginx:80",
            ::parseUpstream,
        )
        val HOST = Variable("HOST", "an IP address or host name to listen on, e.g. 0.0.0.0 or 127.0.0.1") { v ->
            v.takeIf { s -> s.none { it.isWhitespace() || it == '/' } }
        }
        val PORT = int("PORT", 1..65535)
        val MAX_CONNECTIONS = int("CLIENT_MAX_CONNECTIONS", 1..100_000)
        val LIMITS = choice("CLIENT_LIMITS", Limits.entries)
        val CONNECT_TIMEOUT = int("CLIENT_CONNECT_TIMEOUT_MS", 1..3_600_000)
        val REQUEST_TIMEOUT = int("CLIENT_REQUEST_TIMEOUT_MS", 1..3_600_000)
        val ACCESS_LOG = onOff("ACCESS_LOG")
        val RETRY_ON_STALE = choice("CLIENT_RETRY_ON_STALE", RetryOnStale.entries)
        val HEADER_TIMEOUT = int("SERVER_HEADER_TIMEOUT_MS", 100..3_600_000)
        val IDLE_TIMEOUT = int("SERVER_IDLE_TIMEOUT_MS", 100..3_600_000)
        val CA_FILE = Variable("UPSTREAM_CA_FILE", "a readable PEM file of the CA that signed the upstream's certificate") { v ->
            v.takeIf { java.io.File(it).canRead() }
        }
        val HTTP_VERSION = choice("CLIENT_HTTP_VERSION", HttpVersion.entries)
        val TLS_VERSION = choice("CLIENT_TLS_VERSION", TlsVersion.entries)
        val PIPELINING = onOff("CLIENT_PIPELINING")
        val DISPATCHER = Variable("CLIENT_DISPATCHER", ClientDispatcher.ACCEPTS, ClientDispatcher::parse)

        // The network's values, worded as toxiproxy/lab_network.py words them (the runner and compose's
        // toxiproxy-init check them there first).
        private fun whole(name: String, accepts: String, max: Int) =
            Variable(name, accepts) { v -> v.takeIf { s -> s.all { it.isDigit() } }?.toIntOrNull()?.takeIf { it <= max } }
        val RTT = whole("UPSTREAM_RTT_MS", "whole milliseconds from 0 to ${UpstreamNetwork.RTT_MAX_MS}", UpstreamNetwork.RTT_MAX_MS)
        val JITTER = whole("UPSTREAM_JITTER_MS", "whole milliseconds from 0 to UPSTREAM_RTT_MS", UpstreamNetwork.RTT_MAX_MS)
        val BANDWIDTH = whole(
            "UPSTREAM_BANDWIDTH_KBPS",
            "KB/s from 0 (not limited) to ${UpstreamNetwork.BANDWIDTH_MAX_KBPS}",
            UpstreamNetwork.BANDWIDTH_MAX_KBPS,
        )

        private val ALL: List<Variable<*>> = listOf(
            ENGINE, LIFETIME, UPSTREAM_URL, HOST, PORT, MAX_CONNECTIONS, LIMITS, CONNECT_TIMEOUT, REQUEST_TIMEOUT,
            ACCESS_LOG, RETRY_ON_STALE, HEADER_TIMEOUT, IDLE_TIMEOUT, CA_FILE, HTTP_VERSION, TLS_VERSION, PIPELINING,
            DISPATCHER, RTT, JITTER, BANDWIDTH,
        )

        /** Variable name to a one-line description of what it accepts (for errors and docs). */
        val VARIABLES: Map<String, String> = ALL.associate { it.name to it.accepts }

        /** Reads [env] (normally `System.getenv()`); unset or blank variables take the default. */
        fun fromEnv(env: Map<String, String>): ProxyConfig {
            val d = ProxyConfig()
            val config = ProxyConfig(
                engine = ENGINE.read(env) ?: d.engine,
                lifetime = LIFETIME.read(env) ?: d.lifetime,
                upstreamUrl = UPSTREAM_URL.read(env) ?: d.upstreamUrl,
                host = HOST.read(env) ?: d.host,
                port = PORT.read(env) ?: d.port,
                maxConnections = MAX_CONNECTIONS.read(env) ?: d.maxConnections,
                connectTimeoutMs = CONNECT_TIMEOUT.read(env)?.toLong() ?: d.connectTimeoutMs,
                requestTimeoutMs = REQUEST_TIMEOUT.read(env)?.toLong() ?: d.requestTimeoutMs,
                accessLog = ACCESS_LOG.read(env) ?: d.accessLog,
                limits = LIMITS.read(env) ?: d.limits,
                retryOnStale = RETRY_ON_STALE.read(env) ?: d.retryOnStale,
                headerTimeoutMs = HEADER_TIMEOUT.read(env)?.toLong() ?: d.headerTimeoutMs,
                idleTimeoutMs = IDLE_TIMEOUT.read(env)?.toLong() ?: d.idleTimeoutMs,
                upstreamCaFile = CA_FILE.read(env),
                httpVersion = HTTP_VERSION.read(env) ?: d.httpVersion,
                tlsVersion = TLS_VERSION.read(env),
                pipelining = PIPELINING.read(env) ?: d.pipelining,
                network = UpstreamNetwork(RTT.read(env) ?: 0, JITTER.read(env) ?: 0, BANDWIDTH.read(env) ?: 0),
                dispatcher = DISPATCHER.read(env) ?: d.dispatcher,
            )
            return config.also {
                it.checkTls()
                it.checkPipelining()
                it.checkDispatcher()
                it.network.check()
            }
        }

        /** The first JDK with virtual threads. */
        const val VIRTUAL_THREADS_JDK = 21

        /** A dispatcher the engine cannot use, or virtual threads on a JDK without them: one line each. */
        private fun ProxyConfig.checkDispatcher() {
            if (dispatcher == ClientDispatcher.Io) return
            if (engine == Engine.APACHE || engine == Engine.APACHE5) {
                throw ConfigException(
                    "CLIENT_DISPATCHER=${dispatcher.id} changes nothing of CLIENT_ENGINE=${engine.id}: its I/O reactor " +
                        "runs its own threads; use CLIENT_DISPATCHER=io or another engine",
                )
            }
            val jdk = Runtime.version().feature()
            if (dispatcher == ClientDispatcher.Virtual && jdk < VIRTUAL_THREADS_JDK) {
                throw ConfigException(
                    "CLIENT_DISPATCHER=virtual needs JDK $VIRTUAL_THREADS_JDK or later; this JVM is $jdk: " +
                        "run the proxy on a newer JDK or use CLIENT_DISPATCHER=io",
                )
            }
        }

        /** Pipelining is CIO's alone: asked of another engine, one line naming what to change. */
        private fun ProxyConfig.checkPipelining() {
            if (pipelining && engine != Engine.CIO) {
                throw ConfigException(
                    "CLIENT_PIPELINING=on is not possible with CLIENT_ENGINE=${engine.id}: only Ktor's CIO engine " +
                        "pipelines (the others keep a pool of connections); use CLIENT_PIPELINING=off or CLIENT_ENGINE=cio",
                )
            }
        }

        /** The settings that only mean something together: one line naming what to change. */
        private fun ProxyConfig.checkTls() {
            val url = "UPSTREAM_URL='$upstreamUrl'"
            when {
                tls && upstreamCaFile == null -> throw ConfigException(
                    "$url is https but UPSTREAM_CA_FILE is not set: the proxy trusts only the CA it is given " +
                        "(a PEM file), never the system's store or any certificate; set UPSTREAM_CA_FILE",
                )
                !tls && upstreamCaFile != null -> throw ConfigException(
                    "UPSTREAM_CA_FILE is set but $url is http; use an https:// URL or unset UPSTREAM_CA_FILE",
                )
                !tls && httpVersion == HttpVersion.HTTP_2 -> throw ConfigException(
                    "CLIENT_HTTP_VERSION=2 needs an https:// UPSTREAM_URL (HTTP/2 is chosen by ALPN; there is no h2c); " +
                        "use an https:// URL or CLIENT_HTTP_VERSION=1.1",
                )
                !tls && tlsVersion != null -> throw ConfigException(
                    "CLIENT_TLS_VERSION is set but $url is http; use an https:// URL or unset CLIENT_TLS_VERSION",
                )
            }
        }

        private fun parseUpstream(value: String): String? {
            val uri = runCatching { URI(value) }.getOrNull() ?: return null
            val ok = uri.scheme?.lowercase() in setOf("http", "https") && !uri.host.isNullOrEmpty() &&
                (uri.port == -1 || uri.port in 1..65535) &&
                uri.rawQuery == null && uri.rawFragment == null && uri.rawUserInfo == null
            return if (ok) value.trimEnd('/') else null
        }
    }
}

/**
 * What lies between the proxy and the upstream, as the lab set it: a round trip (half each way), its
 * jitter and a bandwidth per connection each way (0: not limited). All zero: nothing, the proxy calls
 * the upstream directly.
 */
data class UpstreamNetwork(val rttMs: Int = 0, val jitterMs: Int = 0, val bandwidthKbps: Int = 0) {
    val on: Boolean get() = rttMs > 0 || jitterMs > 0 || bandwidthKbps > 0

    /** A [ConfigException] when the jitter exceeds the round trip (worded as toxiproxy/lab_network.py words it). */
    fun check() {
        if (jitterMs > rttMs) {
            throw ConfigException(
                "UPSTREAM_JITTER_MS=$jitterMs is more than UPSTREAM_RTT_MS=$rttMs: each round trip varies by up to +- " +
                    "the jitter, which cannot exceed the round trip; lower UPSTREAM_JITTER_MS or raise UPSTREAM_RTT_MS",
            )
        }
    }

    companion object {
        const val RTT_MAX_MS = 10_000
        const val BANDWIDTH_MAX_KBPS = 10_000_000
    }
}
