/**
 * The `HttpClient` under test for a configuration, and the settings it runs with.
 *
 * Each engine's setup and what it reports live together in `lab.proxy.client.engines` ([EngineSetup]); this
 * file only picks the engine and adds what every case shares.
 */
package lab.proxy.client

import io.ktor.client.HttpClient
import lab.proxy.config.ConfigException
import lab.proxy.config.Limits
import lab.proxy.config.ProxyConfig

object ClientFactory {
    /**
     * Call once at start-up, before any client exists: a [ConfigException] when the engine cannot
     * do what is asked of the upstream, or the upstream's CA cannot be read; then the engine's
     * JVM-wide knob.
     */
    fun prepareJvm(config: ProxyConfig) {
        val setup = EngineSetup.of(config.engine)
        setup.refusal(config)?.let { throw ConfigException(it) }
        UpstreamTls.of(config)
        ClientThreads.prepare(config)
        setup.prepareJvm(config)
    }

    /** The lab's client; with fewer [parts], a rung of the ladder that measures what each part costs. */
    fun create(config: ProxyConfig, parts: Set<ClientPart> = ClientPart.ALL): HttpClient =
        EngineSetup.of(config.engine).create(config, parts)

    /** Every setting in force, as names and values for the start-up log and `lab_proxy_info`. */
    fun effectiveSettings(config: ProxyConfig): Map<String, String> {
        val engine = EngineSetup.of(config.engine).settings(config)
        val max = if (config.limits == Limits.FAIR) linkedMapOf("max_connections" to config.maxConnections.toString()) else linkedMapOf()
        return max + engine + EngineSetup.common(config) + ClientThreads.settings(config) + linkedMapOf(
            "header_timeout_ms" to config.headerTimeoutMs.toString(),
            "idle_timeout_ms" to config.idleTimeoutMs.toString(),
            // Every answer is read as a stream (`execute { }`), so a 100 MB body passes a small heap.
            // It is the one part of the lab that costs more than a plain client on a tiny body:
            // about 4 context switches per request; its CPU is in docs/benchmarks.md ("The ladder").
            "upstream_body" to "streamed",
        )
    }
}
