package lab.proxy.relay

import kotlinx.coroutines.Job
import kotlin.test.Test
import kotlin.test.assertFalse
import kotlin.test.assertIs
import kotlin.test.assertTrue

class WatchdogTest {
    private fun waitFor(ms: Long, condition: () -> Boolean): Boolean {
        val end = System.nanoTime() + ms * 1_000_000
        while (System.nanoTime() < end) {
            if (condition()) return true
            Thread.sleep(5)
        }
        return condition()
    }

    @Test
    fun `an exchange without progress is cancelled with the proxy's timeout, not before`() {
        val job = Job()
        var cause: Throwable? = null
        job.invokeOnCompletion { cause = it }
        val started = System.nanoTime()
        val watch = Watchdog.watch(200, job)
        assertTrue(waitFor(5_000) { job.isCancelled }, "not cancelled")
        val elapsedMs = (System.nanoTime() - started) / 1_000_000
        assertTrue(elapsedMs >= 200, "cancelled after $elapsedMs ms")
        assertTrue(watch.expired)
        assertTrue(waitFor(1_000) { cause != null })
        assertIs<UpstreamTimeout>(cause)
    }

    @Test
    fun `progress keeps it going, and a stopped watch does nothing`() {
        val job = Job()
        val watch = Watchdog.watch(150, job)
        repeat(12) { // 600 ms of progress every 50 ms: four timeouts' worth
            Thread.sleep(50)
            watch.progress()
        }
        assertFalse(job.isCancelled)
        watch.stop()
        Thread.sleep(400)
        assertFalse(job.isCancelled)
        assertFalse(watch.expired)
    }
}
