package lab.proxy

import io.ktor.utils.io.ByteChannel
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.copyTo
import io.ktor.utils.io.readAvailable
import io.ktor.utils.io.readRemaining
import io.ktor.utils.io.writeFully
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.yield
import kotlinx.io.readByteArray
import java.io.IOException
import java.nio.ByteBuffer
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertFalse
import kotlin.test.assertSame
import kotlin.test.assertTrue

class CheckedBodyTest {
    private val cut = IOException("cut")

    /** A source that gives `bytes` in two parts, then ends (cleanly, or with `cause`). */
    private fun source(bytes: ByteArray, cause: Throwable? = null): ByteReadChannel = ByteChannel().also { ch ->
        runBlocking {
            ch.writeFully(bytes, 0, bytes.size / 2)
            ch.flush()
        }
        kotlin.concurrent.thread {
            runBlocking {
                ch.writeFully(bytes, bytes.size / 2, bytes.size)
                ch.flush()
                if (cause == null) ch.flushAndClose() else ch.cancel(cause)
            }
        }
    }

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
}
