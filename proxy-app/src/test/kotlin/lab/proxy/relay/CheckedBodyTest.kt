package lab.proxy.relay

import io.ktor.utils.io.ByteChannel
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.copyTo
import io.ktor.utils.io.readAvailable
import io.ktor.utils.io.readRemaining
import io.ktor.utils.io.writeFully
import io.ktor.utils.io.availableForRead
import io.ktor.utils.io.InternalAPI
import kotlinx.coroutines.DelicateCoroutinesApi
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.GlobalScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.yield
import kotlinx.io.Source
import kotlinx.io.readByteArray
import java.io.IOException
import java.nio.ByteBuffer
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReference
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertFalse
import kotlin.test.assertSame
import kotlin.test.assertTrue

class CheckedBodyTest {
    private val cut = IOException("cut")

    /** A source that gives `bytes` in two parts, then ends (cleanly, or with `cause`). */
    private fun source(bytes: ByteArray, cause: Throwable? = null): ByteReadChannel = twoPartSource(bytes, cause)

    @Test
    fun `a whole body reads whole and ends`() = runBlocking {
        val body = CheckedBody(source(ByteArray(100_000) { it.toByte() })) { received ->
            assertEquals(100_000, received)
            null
        }
        val bytes = body.readRemaining().readByteArray()
        assertEquals(100_000, bytes.size)
        assertTrue(body.isClosedForRead)
    }

    @Test
    fun `a cut body fails the read after its last byte and never says it ended`() = runBlocking {
        val body = CheckedBody(source(ByteArray(100_000))) { cut }
        val sink = ByteChannel()
        val e = assertFailsWith<IOException> { body.copyTo(sink) }
        // copyTo closes its destination with the error, and its last flush rethrows it wrapped.
        assertTrue(generateSequence<Throwable>(e) { it.cause }.any { it === cut }, e.toString())
        assertFalse(body.isClosedForRead)
        assertEquals(null, body.closedCause)
    }

    @Test
    fun `a reader that stops at a closed channel, as the Java engine does, gets the error instead`() = runBlocking {
        val body = CheckedBody(source(ByteArray(20_000))) { cut }
        val buffer = ByteBuffer.allocate(8192)
        var read = 0
        val e = assertFailsWith<IOException> {
            while (true) {
                buffer.clear()
                val n = body.readAvailable(buffer)
                if (n < 0) break
                read += n
                yield()
            }
        }
        assertSame(cut, e)
        assertEquals(20_000, read) // every byte that came, then the error: never -1
    }

    @Test
    fun `a source closed with an error fails with that error`() = runBlocking {
        val reset = IOException("reset")
        val body = CheckedBody(source(ByteArray(10), reset)) { null }
        val e = assertFailsWith<IOException> { body.readRemaining() }
        assertEquals("reset", e.message)
    }

    @Test
    fun `a body already sent fails at once`() = runBlocking {
        val body = CheckedBody.failed(cut)
        assertFalse(body.isClosedForRead)
        assertSame(cut, assertFailsWith<IOException> { body.awaitContent() })
    }

    @Test
    fun `the verdict is taken once, with every byte counted`() = runBlocking {
        var calls = 0
        val body = CheckedBody(source(ByteArray(5000))) { received ->
            calls++
            if (received == 5000L) null else cut
        }
        launch { body.readRemaining() }.join()
        assertTrue(body.isClosedForRead)
        assertTrue(body.isClosedForRead)
        assertEquals(1, calls)
    }

    @Test
    fun `asking whether it ended moves no byte, since another thread may be reading`() = runBlocking {
        // Ktor's Java engine asks isClosedForRead from one coroutine while another reads.
        val feed = ByteChannel()
        feed.writeFully(ByteArray(1000), 0, 1000)
        feed.flushAndClose()
        val body = CheckedBody(feed) { null }
        assertFalse(body.isClosedForRead)
        assertEquals(1000, feed.availableForRead) // still in the source, for the reader to take
        assertEquals(1000, body.readRemaining().readByteArray().size)
        assertTrue(body.isClosedForRead)
    }

    /**
     * Ktor's Apache5 engine reads the body on its I/O thread (`produce`, and `available()` after
     * each), and when nothing is there it waits in a coroutine that resumes on the thread that fed
     * the body. Here the reader asks `availableForRead` all the while a wait is under way: the
     * source must see one reader at a time (a read during a wait is what broke segments and lost
     * bytes), and every byte come once, in order, the body ending whole.
     */
    @Test
    fun `a reader on one thread and a waiter on another, as Apache5 reads, lose no byte`() {
        var waits = 0
        repeat(200) { waits += readAsApache5(size = 1L * 1024 * 1024) }
        assertTrue(waits > 0, "no read ever waited: the test did not test")
    }

    /** A source that counts the times two readers were inside it at once (a wait counts throughout). */
    private class OneReaderAtATime(private val inner: ByteReadChannel) : ByteReadChannel {
        val overlaps = AtomicInteger()
        private val inside = AtomicInteger()

        private inline fun <T> entered(block: () -> T): T {
            if (inside.incrementAndGet() > 1) overlaps.incrementAndGet()
            try {
                return block()
            } finally {
                inside.decrementAndGet()
            }
        }

        override val closedCause: Throwable? get() = inner.closedCause
        override val isClosedForRead: Boolean get() = entered { inner.isClosedForRead }

        @InternalAPI
        override val readBuffer: Source get() = entered { inner.readBuffer }

        override suspend fun awaitContent(min: Int): Boolean = entered { inner.awaitContent(min) }
        override fun cancel(cause: Throwable?) = inner.cancel(cause)
    }

    /** Reads one body of `size` bytes as Apache5 does; returns how many waits it took. */
    private fun readAsApache5(size: Long): Int {
        val feed = ByteChannel()
        val source = OneReaderAtATime(feed)
        val body = CheckedBody(source) { received -> if (received == size) null else IOException("got $received of $size") }
        val writer = kotlin.concurrent.thread {
            runBlocking {
                val chunk = ByteArray(8_000)
                var sent = 0L
                while (sent < size) {
                    val n = minOf(chunk.size.toLong(), size - sent).toInt()
                    for (i in 0 until n) chunk[i] = ((sent + i) % 251).toByte()
                    feed.writeFully(chunk, 0, n)
                    feed.flush()
                    sent += n
                }
                feed.flushAndClose()
            }
        }
        val waiting = AtomicBoolean()
        val failed = AtomicReference<Throwable>()
        var read = 0L
        var waits = 0
        val deadline = System.nanoTime() + 30_000_000_000L
        while (!body.isClosedForRead && failed.get() == null && System.nanoTime() < deadline) {
            var n: Int
            do {
                n = body.readAvailable { buffer: ByteBuffer ->
                    val count = buffer.remaining()
                    repeat(count) {
                        check(buffer.get() == ((read + it) % 251).toByte()) { "byte ${read + it} is wrong" }
                    }
                    read += count
                    count
                }
            } while (n > 0)
            if (n == -1 && !waiting.getAndSet(true)) {
                waits++
                @OptIn(DelicateCoroutinesApi::class)
                GlobalScope.launch(Dispatchers.Unconfined) {
                    try {
                        body.awaitContent()
                    } catch (e: Throwable) {
                        failed.set(e)
                    } finally {
                        waiting.set(false)
                    }
                }
            }
            while (waiting.get() && System.nanoTime() < deadline) body.availableForRead
        }
        writer.join(10_000)
        assertEquals(0, source.overlaps.get(), "reads of the source while another reader was in it")
        assertEquals(null, failed.get())
        assertEquals(size, read)
        assertTrue(body.isClosedForRead)
        return waits
    }
}
