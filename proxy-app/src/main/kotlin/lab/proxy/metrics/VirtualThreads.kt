/**
 * The client's virtual threads as the JDK sees them, for `/metrics` when they run it
 * (`CLIENT_DISPATCHER=virtual`):
 * - `lab_virtual_threads_pinned_total` (and `_seconds_total`): a virtual thread that parked while
 *   pinned to its carrier (inside `synchronized` on JDK 21-23, in native code, a class initializer),
 *   so it held the carrier instead of giving it back. Counted from JFR's `jdk.VirtualThreadPinned`
 *   events, every one of them (threshold 0; the JDK's default reports only those over 20 ms).
 * - `lab_threads_carriers`: the carrier threads (`jdk.internal.misc.CarrierThread`), the platform
 *   threads the virtual threads run on.
 */
package lab.proxy.metrics

import io.micrometer.core.instrument.FunctionCounter
import io.micrometer.core.instrument.Gauge
import io.micrometer.core.instrument.MeterRegistry
import jdk.jfr.consumer.RecordingStream
import java.time.Duration
import java.util.concurrent.atomic.AtomicLong

object VirtualThreads {
    private val pinned = AtomicLong()
    private val pinnedNanos = AtomicLong()

    @Volatile
    private var stream: RecordingStream? = null

    /** Starts counting (once); false where the JVM cannot stream JFR events. */
    @Synchronized
    fun startCounting(): Boolean {
        if (stream != null) return true
        return runCatching {
            RecordingStream().apply {
                enable("jdk.VirtualThreadPinned").withThreshold(Duration.ZERO)
                onEvent("jdk.VirtualThreadPinned") { e ->
                    pinned.incrementAndGet()
                    pinnedNanos.addAndGet(e.duration.toNanos())
                }
                startAsync()
            }
        }.onSuccess { stream = it }.isSuccess
    }

    fun bind(registry: MeterRegistry) {
        FunctionCounter.builder("lab.virtual.threads.pinned", pinned) { it.get().toDouble() }
            .description("Virtual threads that parked while pinned to their carrier (JFR jdk.VirtualThreadPinned)")
            .register(registry)
        FunctionCounter.builder("lab.virtual.threads.pinned.seconds", pinnedNanos) { it.get() / 1e9 }
            .description("Time virtual threads spent pinned to their carrier while parked").register(registry)
        Gauge.builder("lab.threads.carriers", this) { carriers().toDouble() }
            .description("Carrier threads of the virtual threads (jdk.internal.misc.CarrierThread)").register(registry)
    }

    /** The live carrier threads, read from the root thread group (no stack dump). */
    fun carriers(): Int {
        var root = Thread.currentThread().threadGroup
        while (root.parent != null) root = root.parent
        val all = arrayOfNulls<Thread>(root.activeCount() * 2 + 16)
        val n = root.enumerate(all, true)
        return (0 until n).count { all[it]?.javaClass?.name == "jdk.internal.misc.CarrierThread" }
    }
}
