/**
 * One client engine under test: how its `HttpClient` is built with the lab's settings, and the
 * settings it reports, side by side in one file per engine (like Ktor's own engine modules). Those
 * files, `lab.proxy.client.engines`, import this package (the contract, [UpstreamTls], [ClientPools]);
 * this package never imports them: it finds a setup by its class name ([EngineSetup.of]).
 *
 * Engine defaults differ wildly (CIO: 100 connections per route; OkHttp: 5 requests per host;
 * Apache: 10 s socket timeout; Java: HTTP/2 upgrade attempts over cleartext), and earlier
 * studies measured those defaults instead of the engines. With `CLIENT_LIMITS=fair` one
 * `CLIENT_MAX_CONNECTIONS` and one pair of timeouts are set on each engine's own knobs;
 * `defaults` leaves the engine's limits alone, to replay those studies. [settings] reports what
 * is in force, read back from the engine's configuration where the engine exposes it.
 */
package lab.proxy.client

import io.ktor.client.HttpClient
import io.ktor.client.HttpClientConfig
import io.ktor.client.plugins.HttpTimeout
import lab.proxy.config.BuildInfo
import lab.proxy.config.ConfigException
import lab.proxy.config.Engine
import lab.proxy.config.HttpVersion
import lab.proxy.config.Limits
import lab.proxy.config.ProxyConfig
import lab.proxy.config.TlsVersion

/**
 * The lab's client settings in parts. The lab's client has them all; `lab bench --ladder` and
 * `lab study engines --ladder` add them one at a time to a plain client, to show what each costs
 * each engine (docs/benchmarks.md).
 */
enum class ClientPart(val id: String) {
    /** `CLIENT_MAX_CONNECTIONS` on the engine's own knobs (with `CLIENT_LIMITS=fair`). */
    LIMITS("limits"),

    /** No redirects followed, no default transformers (no added headers). */
    FLAGS("flags"),

    /** The engine's other settings: its pool's keep-alive, retry on a stale connection, HTTP version, I/O threads. */
    ENGINE("engine"),

    /**
     * The connect timeout on the engine's own knob, and its own read timeouts (where it has them)
     * no shorter than the request timeout; the request timeout itself is the proxy's [lab.proxy.relay.Watchdog].
     */
    TIMEOUTS("timeouts"),

    /** Ktor's HttpTimeout plugin instead: what the lab used before, kept to measure it (not in [ALL]). */
    TIMEOUTS_PLUGIN("timeouts-plugin"),
    ;

    companion object {
        val ALL: Set<ClientPart> = entries.toSet() - TIMEOUTS_PLUGIN

        /** `limits,flags` -> those parts; "all" -> every part; an unknown name is a [ConfigException]. */
        fun parse(text: String): Set<ClientPart> = if (text.trim() == "all") ALL else text.split(",")
            .map { it.trim() }.filter { it.isNotEmpty() }
            .map { id -> entries.firstOrNull { it.id == id } ?: throw ConfigException("no client part '$id'; parts: ${entries.joinToString(", ") { it.id }}, all") }
            .toSet()
    }
}

interface EngineSetup {
    /**
     * A new client for [config]: the lab's limits (or the engine's, with `CLIENT_LIMITS=defaults`),
     * with only [parts] of the lab's settings (all of them in the lab).
     */
    fun create(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL): HttpClient

    /** The engine-specific settings in force, as names and values for the log and `lab_proxy_info`. */
    fun settings(config: ProxyConfig): Map<String, String>

    /** Called once at start-up, before the first client exists (a JVM-wide knob, for one engine). */
    fun prepareJvm(config: ProxyConfig) = Unit

    /**
     * Null when the engine can do what [config] asks of the upstream (HTTP version, TLS version);
     * else one line naming the engine, its limit and what it can do. Checked at start: an engine
     * never falls back silently.
     */
    fun refusal(config: ProxyConfig): String? = null

    companion object {
        /** The engine's setup; a [ConfigException] naming the release and the engines it has when this build lacks it. */
        fun of(engine: Engine): EngineSetup = builtOrNull(engine) ?: throw ConfigException(
            "CLIENT_ENGINE='${engine.id}' is not in this build: Ktor ${BuildInfo.ktorVersion} does not publish " +
                "the ${engine.id} engine; use one of ${built().joinToString(", ") { it.id }}, " +
                "or a build of a release that has it (see ktor-releases.tsv)",
        )

        /** The engines this jar holds, in [Engine] order. */
        fun built(): List<Engine> = Engine.entries.filter { builtOrNull(it) != null }

        /**
         * Each engine's setup is compiled only into builds of a release that publishes the engine
         * (its source root `src/engines/<id>/kotlin`, a profile of pom.xml: ktor-releases.tsv says
         * which), so it is found by name: `lab.proxy.client.engines.CioSetup` for [Engine.CIO].
         */
        private fun builtOrNull(engine: Engine): EngineSetup? = runCatching {
            Class.forName("lab.proxy.client.engines.${engine.setupName}").getField("INSTANCE").get(null) as EngineSetup
        }.getOrNull()

        /** Idle keep-alive for pooled connections, the same for every engine that lets us set it. */
        const val KEEP_ALIVE_MS = 5_000L

        /** I/O threads of the engines that take a count (Apache, Apache5): Ktor's own default. */
        const val IO_THREADS = 4

        /** Settings shared by every engine, reported beside the engine's own. */
        fun common(config: ProxyConfig): Map<String, String> = linkedMapOf(
            "limits" to config.limits.id,
            "connect_timeout_ms" to config.connectTimeoutMs.toString(),
            "request_timeout_ms" to config.requestTimeoutMs.toString(),
            "request_timeout" to "proxy_watchdog", // Watchdog.kt: no progress for request_timeout_ms
            "follow_redirects" to "false",
            "scheme" to config.scheme,
            "http_version" to config.httpVersion.wire,
            "tls_version" to (if (config.tls) config.tlsVersion?.jsse ?: "engine" else "none"),
        )
    }
}

/** True when the lab's limits apply (`CLIENT_LIMITS=fair`). */
val ProxyConfig.fair: Boolean get() = limits == Limits.FAIR

/** What every client shares: no redirects followed, no added headers (and, to measure it, Ktor's timeout plugin). */
fun HttpClientConfig<*>.labCommon(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL) {
    expectSuccess = false
    if (ClientPart.FLAGS in parts) {
        followRedirects = false
        // The default transformers add "Accept-Charset: UTF-8" to every request; a proxy adds no
        // headers of its own, and the raw body channel needs no transformer.
        useDefaultTransformers = false
    }
    if (ClientPart.TIMEOUTS_PLUGIN in parts) {
        install(HttpTimeout) {
            connectTimeoutMillis = config.connectTimeoutMs
            requestTimeoutMillis = config.requestTimeoutMs
        }
    }
}

/** The line an engine refuses a protocol with: the engine, its limit, what it can do. */
fun refuse(config: ProxyConfig, setting: String, limit: String, can: String): String =
    "$setting is not possible with CLIENT_ENGINE=${config.engine.id}: $limit; $can"

/** HTTP/2 asked of an engine that speaks HTTP/1.1 only. */
fun ProxyConfig.refuseHttp2(limit: String): String? =
    if (httpVersion == HttpVersion.HTTP_2) refuse(this, "CLIENT_HTTP_VERSION=2", limit, "use CLIENT_HTTP_VERSION=1.1 or another engine") else null

/** TLS 1.3 asked of an engine whose TLS stops at 1.2. */
fun ProxyConfig.refuseTls13(limit: String): String? =
    if (tlsVersion == TlsVersion.TLS_1_3) refuse(this, "CLIENT_TLS_VERSION=1.3", limit, "use CLIENT_TLS_VERSION=1.2 or leave it unset") else null
