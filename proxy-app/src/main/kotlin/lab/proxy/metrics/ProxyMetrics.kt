/**
 * Everything the proxy exports at `/metrics`, in one Prometheus registry.
 *
 * Every series carries `engine` and `lifetime` tags (the case), so one Prometheus can hold
 * many runs. Names in Prometheus form are listed in the README's metrics table.
 */
package lab.proxy.metrics

import io.micrometer.core.instrument.FunctionCounter
import io.micrometer.core.instrument.Gauge
import io.micrometer.core.instrument.MeterRegistry
import io.micrometer.core.instrument.Timer
import io.micrometer.core.instrument.binder.MeterBinder
import io.micrometer.core.instrument.binder.jvm.ClassLoaderMetrics
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics
import io.micrometer.core.instrument.binder.system.FileDescriptorMetrics
import io.micrometer.core.instrument.binder.system.ProcessorMetrics
import io.micrometer.core.instrument.binder.system.UptimeMetrics
import io.micrometer.prometheusmetrics.PrometheusConfig
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry
import lab.proxy.client.ClientCounters
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientPools
import lab.proxy.client.UpstreamTls
import lab.proxy.config.BuildInfo
import lab.proxy.config.ClientDispatcher
import lab.proxy.config.ProxyConfig
import lab.proxy.server.ServerGuards
import java.lang.management.ManagementFactory
import java.time.Duration
import java.util.concurrent.ConcurrentHashMap

class ProxyMetrics(config: ProxyConfig, val counters: ClientCounters = ClientCounters()) {
    val registry = PrometheusMeterRegistry(PrometheusConfig.DEFAULT).apply {
        config().commonTags("engine", config.engine.id, "lifetime", config.lifetime.id)
    }

    /** Bound with the other meters in [binders], after Ktor's plugin has set its filters. */
    @Volatile
    private var bound: MeterRegistry? = null

    /** One timer per outcome and negotiated protocol (`HTTP/1.1`, `HTTP/2.0`, `none` without a response). */
    private val upstreamTimers = ConcurrentHashMap<Pair<Outcome, String>, Timer>()

    /** The protocols the upstream has answered with so far, and the info gauge that shows them. */
    private val negotiated = ConcurrentHashMap.newKeySet<String>()
    private var info: Gauge? = null

    @Volatile
    private var shownTls: String? = null
    private val log = org.slf4j.LoggerFactory.getLogger("lab.proxy.upstream")
    private val tls = UpstreamTls.of(config)
    private val config = config
    private val settings = ClientFactory.effectiveSettings(config)

    /** The JVM and process meters; installed through Ktor's Micrometer plugin. */
    val binders: List<MeterBinder> = listOf(
        ClassLoaderMetrics(),
        JvmMemoryMetrics(),
        JvmGcMetrics(),
        ProcessorMetrics(),
        JvmThreadMetrics(),
        FileDescriptorMetrics(),
        UptimeMetrics(),
        MeterBinder { bindLabMeters(it, config) },
    )

    /** One upstream exchange; [protocol] is the version the upstream answered with (`none`: no answer). */
    fun recordUpstream(outcome: Outcome, protocol: String, nanos: Long) {
        val registry = bound ?: return
        upstreamTimers.computeIfAbsent(outcome to protocol) { (o, p) -> upstreamTimer(registry, o, p) }
            .record(Duration.ofNanos(nanos))
    }

    /**
     * The upstream answered in [protocol]: called as soon as its answer is in, before the caller
     * gets it, so `lab_proxy_info` already shows what was negotiated when the caller looks.
     */
    fun noteAnswer(protocol: String) {
        val registry = bound ?: return
        val tlsChanged = tls != null && tls.trustManager.lastTlsVersion != shownTls
        if (negotiated.add(protocol)) {
            registerInfo(registry)
            if (protocol != config.httpVersion.wire) {
                log.warn("asked the upstream for {}, it answered with {} (lab_proxy_info shows what was negotiated)", config.httpVersion.wire, protocol)
            }
        } else if (tlsChanged) {
            registerInfo(registry)
        }
    }

    private fun upstreamTimer(registry: MeterRegistry, outcome: Outcome, protocol: String): Timer =
        Timer.builder("lab.upstream.requests")
            .description("Upstream exchanges through the engine under test, until the body is relayed")
            .tag("outcome", outcome.tag)
            .tag("protocol", protocol)
            .publishPercentileHistogram()
            .minimumExpectedValue(LOWEST_LATENCY)
            .maximumExpectedValue(Duration.ofSeconds(60))
            .register(registry)

    fun scrape(): String = registry.scrape()

    private fun bindLabMeters(registry: MeterRegistry, config: ProxyConfig) {
        // The outcomes of plain HTTP/1.1 exist from the start, so a dashboard has them before the first request.
        Outcome.entries.forEach { o -> upstreamTimers.computeIfAbsent(o to NONE) { upstreamTimer(registry, o, NONE) } }
        bound = registry
        // Not "created": Prometheus reserves the _created suffix and would strip it.
        FunctionCounter.builder("lab.clients.opened", counters) { it.created.get().toDouble() }
            .description("HttpClient instances created").register(registry)
        FunctionCounter.builder("lab.clients.closed", counters) { it.closed.get().toDouble() }
            .description("HttpClient instances closed").register(registry)
        Gauge.builder("lab.clients.open", counters) { (it.created.get() - it.closed.get()).toDouble() }
            .description("HttpClient instances created and not yet closed").register(registry)

        Gauge.builder("lab.server.connections.open", ServerGuards) { it.openConnections.get().toDouble() }
            .description("The callers' connections to the proxy, accepted and not yet closed").register(registry)
        ServerGuards.refused.forEach { (status, count) ->
            FunctionCounter.builder("lab.server.refused", count) { it.get().toDouble() }.tag("status", status.toString())
                .description("Requests the proxy refused before Ktor saw them (RequestChecks), answered and closed").register(registry)
        }
        Gauge.builder("lab.threads.active.unparked", ThreadSampler) { it.activeUnparked().toDouble() }
            .description("Live threads whose top stack frame is not park (runnable, blocked in I/O or waiting on a monitor)")
            .register(registry)
        if (config.dispatcher == ClientDispatcher.Virtual && VirtualThreads.startCounting()) {
            VirtualThreads.bind(registry)
        }
        registerInfo(registry)
        registerNetworkInfo(registry)
        bindConnections(registry)
        tls?.let { bindTls(registry, it) }
    }

    /**
     * `lab_network_info`: what the lab put between the proxy and the upstream (`rtt_ms`, `jitter_ms`,
     * `bandwidth_kbps`; all `0`: nothing). Not applied here: Toxiproxy does that (docs/network.md).
     */
    private fun registerNetworkInfo(registry: MeterRegistry) {
        val n = config.network
        Gauge.builder("lab.network.info") { 1.0 }
            .description("The network between the proxy and the upstream as the lab set it; value is always 1")
            .tag("rtt_ms", n.rttMs.toString())
            .tag("jitter_ms", n.jitterMs.toString())
            .tag("bandwidth_kbps", n.bandwidthKbps.toString())
            .tag("network", if (n.on) "on" else "none")
            .register(registry)
    }

    /**
     * The proxy's sockets to the upstream by state (the kernel's view, alike for every engine), and the
     * connections in the client's pool, in use and idle, where the engine exposes its pool.
     */
    private fun bindConnections(registry: MeterRegistry) {
        // Held strongly: a gauge keeps only a weak reference to its object by default.
        val sockets = UpstreamSockets(UpstreamSockets.portOf(config.upstreamUrl))
        Gauge.builder("lab.upstream.sockets", sockets) { it.counts().established.toDouble() }
            .description("The proxy's TCP sockets to the upstream's port, by state (from /proc/self/net/tcp)")
            .tag("state", "established").strongReference(true).register(registry)
        Gauge.builder("lab.upstream.sockets", sockets) { it.counts().timeWait.toDouble() }
            .description("The proxy's TCP sockets to the upstream's port, by state (from /proc/self/net/tcp)")
            .tag("state", "time_wait").strongReference(true).register(registry)
        if (settings["pool_metrics"] != "exposed") return
        Gauge.builder("lab.client.pool.connections", ClientPools) { it.total().inUse.toDouble() }
            .description("Connections in the clients' pools (summed over live clients), by state")
            .tag("state", "in_use").register(registry)
        Gauge.builder("lab.client.pool.connections", ClientPools) { it.total().idle.toDouble() }
            .description("Connections in the clients' pools (summed over live clients), by state")
            .tag("state", "idle").register(registry)
    }

    /** Full TLS handshakes the client made, by TLS version and the protocol ALPN chose (resumed ones are not counted). */
    private fun bindTls(registry: MeterRegistry, tls: UpstreamTls) {
        fun register(key: Pair<String, String>) {
            FunctionCounter.builder("lab.upstream.tls.handshakes", tls) { it.fullHandshakes[key]?.sum()?.toDouble() ?: 0.0 }
                .description("Full TLS handshakes with the upstream (a resumed session is not one), as the client saw them")
                .tag("tls_version", key.first)
                .tag("alpn", key.second)
                .register(registry)
        }
        tls.trustManager.onNewKind = ::register
        tls.fullHandshakes.keys.forEach(::register) // seen before the registry was bound
    }

    /**
     * `lab_proxy_info`: the case and every effective setting, and what the upstream negotiated so far
     * (`negotiated_http_version`, `negotiated_tls_version`; `none` before the first answer). Registered
     * again when a new protocol is seen (rare: once per run, or on a fallback).
     */
    @Synchronized
    private fun registerInfo(registry: MeterRegistry) {
        val builder = Gauge.builder("lab.proxy.info") { 1.0 }
            .description("The case and the effective client settings; value is always 1")
            .tag("case", config.caseName)
            .tag("ktor_version", KTOR_VERSION)
            .tag("ktor_micrometer_version", BuildInfo.micrometerPluginVersion)
            .tag("java_version", System.getProperty("java.version"))
            .tag("upstream", config.upstreamUrl)
        settings.forEach { (k, v) -> builder.tag(k, v) }
        builder.tag("negotiated_http_version", negotiated.sorted().joinToString("+").ifEmpty { NONE })
        shownTls = tls?.trustManager?.lastTlsVersion
        builder.tag("negotiated_tls_version", shownTls ?: NONE)
        // Everything computed first: between the old one's removal and the new one's registration a
        // scrape would find no lab_proxy_info.
        info?.let { registry.remove(it) }
        info = builder.register(registry)
    }

    companion object {
        /** The Ktor release the jar was built with. */
        val KTOR_VERSION: String = BuildInfo.ktorVersion

        /** The protocol of an exchange without an answer, and what is not negotiated yet. */
        const val NONE = "none"
    }
}

/** Samples thread top frames the way the thread-count study did. */
object ThreadSampler {
    private val threads = ManagementFactory.getThreadMXBean()

    /**
     * Threads alive whose top frame is not a `park` call. Threads with no Java frame at all
     * (signal dispatcher and the like) are not counted.
     */
    fun activeUnparked(): Int =
        threads.getThreadInfo(threads.allThreadIds, 1).count { info ->
            val top = info?.stackTrace?.firstOrNull() ?: return@count false
            top.methodName != "park"
        }
}
