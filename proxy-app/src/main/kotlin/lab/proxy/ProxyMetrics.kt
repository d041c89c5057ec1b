/**
 * Everything the proxy exports at `/metrics`, in one Prometheus registry.
 *
 * Every series carries `engine` and `lifetime` tags (the case), so one Prometheus can hold
 * many runs. Names in Prometheus form are listed in the README's metrics table.
 */
package lab.proxy

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
import java.lang.management.ManagementFactory
import java.time.Duration

class ProxyMetrics(config: ProxyConfig, val counters: ClientCounters = ClientCounters()) {
    val registry = PrometheusMeterRegistry(PrometheusConfig.DEFAULT).apply {
        config().commonTags("engine", config.engine.id, "lifetime", config.lifetime.id)
    }

    /** Registered with the other meters in [binders], after Ktor's plugin has set its filters. */
    @Volatile
    private var upstreamTimers: Map<Outcome, Timer> = emptyMap()

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

    fun recordUpstream(outcome: Outcome, nanos: Long) {
        upstreamTimers[outcome]?.record(Duration.ofNanos(nanos))
    }

    fun scrape(): String = registry.scrape()

    private fun bindLabMeters(registry: MeterRegistry, config: ProxyConfig) {
        upstreamTimers = Outcome.entries.associateWith { outcome ->
            Timer.builder("lab.upstream.requests")
                .description("Upstream exchanges through the engine under test, until the body is relayed")
                .tag("outcome", outcome.tag)
                .publishPercentileHistogram()
                .minimumExpectedValue(Duration.ofMillis(1))
                .maximumExpectedValue(Duration.ofSeconds(60))
                .register(registry)
        }
        // Not "created": Prometheus reserves the _created suffix and would strip it.
        FunctionCounter.builder("lab.clients.opened", counters) { it.created.get().toDouble() }
            .description("HttpClient instances created").register(registry)
        FunctionCounter.builder("lab.clients.closed", counters) { it.closed.get().toDouble() }
            .description("HttpClient instances closed").register(registry)
        Gauge.builder("lab.clients.open", counters) { (it.created.get() - it.closed.get()).toDouble() }
            .description("HttpClient instances created and not yet closed").register(registry)

        Gauge.builder("lab.threads.active.unparked", ThreadSampler) { it.activeUnparked().toDouble() }
            .description("Live threads whose top stack frame is not park (runnable, blocked in I/O or waiting on a monitor)")
            .register(registry)

        val info = Gauge.builder("lab.proxy.info") { 1.0 }
            .description("The case and the effective client settings; value is always 1")
            .tag("case", config.caseName)
            .tag("ktor_version", KTOR_VERSION)
            .tag("java_version", System.getProperty("java.version"))
            .tag("upstream", config.upstreamUrl)
        ClientFactory.effectiveSettings(config).forEach { (k, v) -> info.tag(k, v) }
        info.register(registry)
    }

    companion object {
        /** The Ktor release the jar was built with. */
        val KTOR_VERSION: String = BuildInfo.ktorVersion
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
