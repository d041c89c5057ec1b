/**
 * The request timeout (`CLIENT_REQUEST_TIMEOUT_MS`), the proxy's own and the same for every engine:
 * the longest the upstream exchange may go without progress, waiting for the answer or between
 * two parts of a body either way.
 *
 * Why not Ktor's `HttpTimeout` plugin: per request it launches a timer coroutine, two dispatches
 * on `Dispatchers.IO`, and a heap entry on kotlinx's timer thread, a fixed cost that weighed most
 * on the engines whose own work per request is light (measured: 10-20% of the rate of OkHttp,
 * Apache5 and Java in-process; docs/benchmarks.md). Here one wheel timer serves the process
 * (Netty's `HashedWheelTimer`, a tick every [TICK_MS]): arming a watch queues one entry, progress is
 * one volatile write, and only a watch that reaches its deadline does more (it looks at the last
 * progress and, if any, waits again for the rest).
 */
package lab.proxy.relay

import io.netty.util.HashedWheelTimer
import io.netty.util.Timeout
import io.netty.util.TimerTask
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Job
import java.util.concurrent.ThreadFactory
import java.util.concurrent.TimeUnit

/** The exchange made no progress for [timeoutMs]: the proxy's own timeout, cancelling it. */
class UpstreamTimeout(val timeoutMs: Long) : CancellationException("no progress from the upstream exchange in $timeoutMs ms")

object Watchdog {
    const val TICK_MS = 20L

    private val timer = HashedWheelTimer(
        ThreadFactory { r -> Thread(r, "lab-watchdog").apply { isDaemon = true } },
        TICK_MS,
        TimeUnit.MILLISECONDS,
        512,
    )

    /** Watches [job]: cancelled with an [UpstreamTimeout] once [timeoutMs] pass without [Watch.progress]. */
    fun watch(timeoutMs: Long, job: Job): Watch = Watch(timeoutMs, job).also { it.arm(timeoutMs) }

    class Watch internal constructor(private val timeoutMs: Long, private val job: Job) : TimerTask {
        @Volatile
        private var last = System.nanoTime()

        @Volatile
        private var pending: Timeout? = null

        /** True once the timeout has cancelled the exchange. */
        @Volatile
        var expired = false
            private set

        /** A part of a body moved (or the answer came): the timeout counts from now. */
        fun progress() {
            last = System.nanoTime()
        }

        /** The exchange ended: the watch does nothing more. */
        fun stop() {
            pending?.cancel()
            pending = null
        }

        internal fun arm(delayMs: Long) {
            pending = timer.newTimeout(this, delayMs, TimeUnit.MILLISECONDS)
        }

        override fun run(timeout: Timeout) {
            if (timeout.isCancelled || pending !== timeout) return
            val idleMs = (System.nanoTime() - last) / 1_000_000
            if (idleMs < timeoutMs) {
                arm(timeoutMs - idleMs)
                return
            }
            expired = true
            job.cancel(UpstreamTimeout(timeoutMs))
        }
    }
}
