/**
 * The caller's body as the engine reads it: a channel that ends only when the body is whole, and
 * otherwise fails every read; it never closes to say "cut".
 *
 * Why not close it with the error, as Ktor's own channels do: two engines take a closed channel,
 * cause or none, for the end of the body and send it on as complete (a chunked upload's last
 * chunk). Ktor 3.4's Java engine (`JavaHttpRequestBodyPublisher.readData`) signals `onComplete`
 * once its channel `isClosedForRead`, without looking at the cause; its OkHttp engine copies the
 * channel with `copyTo`, whose loop stops quietly at a channel closed with an error, and then OkHttp
 * closes the body with its last chunk. Only an error thrown from a read reaches them as an error,
 * and they abort the request (Java: `onError`; OkHttp: the body's writer fails, which cancels the
 * call, closing its socket, before its `writeTo` returns). So here the end of the source is judged
 * once, by [verdict], before anything can see the end: whole, and the channel ends; cut, and every
 * read from then on throws that error while the channel still says it is open. CIO, Apache and
 * Apache5 abort on a read's error too.
 */
package lab.proxy.relay

import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.InternalAPI
import io.ktor.utils.io.availableForRead
import kotlinx.io.Buffer

@OptIn(InternalAPI::class)
class CheckedBody(
    private val source: ByteReadChannel,
    /** Called whenever bytes move from the source (the request timeout counts from the last). */
    private val progress: () -> Unit = {},
    /** Called once the source has ended, with the bytes it gave: null when whole, else why not. */
    private val verdict: (received: Long) -> Throwable?,
) : ByteReadChannel {
    /** The reader's bytes: only the reading thread moves bytes into it ([pull]) or out of it. */
    private val buffer = Buffer()

    /** Guards [waiting], [received] and every touch of [source] outside a wait. */
    private val lock = Any()

    /** True while [awaitContent] waits in the source: the source is the waiter's alone. */
    private var waiting = false
    private var received = 0L

    /**
     * A wait saw the source end and its verdict was whole. The end is then [WHOLE] once the bytes
     * the source still held are pulled, and the verdict is not asked twice.
     */
    private var judgedWhole = false

    /** Set once the source has ended: [WHOLE], or the error every read throws from then on. */
    @Volatile
    private var end: Throwable? = null

    override val closedCause: Throwable? get() = null

    /**
     * Reads [buffer] only, never fills it: Ktor's Java engine asks this from one coroutine while
     * another may be reading. `end` is read first: once it says whole, the bytes pulled before it
     * are seen, so a last part still in [buffer] keeps the channel open.
     */
    override val isClosedForRead: Boolean
        get() {
            if (end == null) synchronized(lock) { judge() }
            return end === WHOLE && buffer.exhausted()
        }

    override val readBuffer: Buffer
        get() {
            pull()
            if (buffer.exhausted()) failure()?.let { throw it }
            return buffer
        }

    /**
     * Waits for the source without touching [buffer] once it waited. Ktor's Apache5 engine calls
     * this from a coroutine that resumes on the thread that fed the source, while its I/O thread
     * goes on asking `available()` and reading: two threads moving bytes through one buffer lost
     * and broke segments (a whole 100 MB upload failed 17 times in 102 with both cores busy, with
     * `NullPointerException`, "cannot compact" or 8,192 bytes missing). So the source is the
     * waiter's alone while it waits, and the bytes it brought stay there for the reader's [pull]:
     * after `true` they are in [readBuffer] when it is asked for again (every engine asks again; a
     * caller that kept the buffer from before the wait would find it empty).
     */
    override suspend fun awaitContent(min: Int): Boolean {
        val wanted: Int
        synchronized(lock) {
            pull()
            if (buffer.size >= min) return true
            when (val e = end) {
                null -> Unit
                WHOLE -> return false
                else -> throw e // never "no more": to some callers that reads as the body's end
            }
            check(!waiting) { "the caller's body is awaited twice at once" }
            waiting = true
            wanted = min - buffer.size.toInt()
        }
        val more: Boolean
        val judged: Throwable?
        try {
            more = source.awaitContent(wanted)
            // The source ended short of what was asked: judge it here, with the bytes it still holds.
            judged = when {
                more -> null
                else -> source.closedCause ?: verdict(synchronized(lock) { received } + source.availableForRead)
            }
        } catch (cause: Throwable) {
            synchronized(lock) {
                waiting = false
                if (end == null) end = cause
            }
            throw cause
        }
        synchronized(lock) {
            waiting = false
            if (judged != null && end == null) end = judged
            if (!more && judged == null) judgedWhole = true
        }
        judged?.let { throw it }
        return more
    }

    override fun cancel(cause: Throwable?) {
        source.cancel(cause)
    }

    /**
     * Moves what the source holds into [buffer], counting it, and judges the source once it ended;
     * nothing while a wait holds the source (the reader then sees what it already has).
     */
    private fun pull() {
        synchronized(lock) {
            if (waiting || end != null) return
            if (source.closedCause == null) {
                val moved = buffer.transferFrom(source.readBuffer)
                if (moved > 0) progress()
                received += moved
            }
            judge()
        }
    }

    /**
     * Under [lock]: once the source has ended and every byte of it was counted (a closed source
     * holds none), its end judged once; nothing while a wait holds the source.
     */
    private fun judge() {
        if (end == null && !waiting && source.isClosedForRead) {
            end = source.closedCause ?: (if (judgedWhole) null else verdict(received)) ?: WHOLE
        }
    }

    private fun failure(): Throwable? = end?.takeIf { it !== WHOLE }

    companion object {
        /** The mark of a source that ended whole (never thrown). */
        private val WHOLE = Throwable("whole")

        /** A body that fails its first read with [cause]: nothing of it may be sent. */
        fun failed(cause: Throwable): ByteReadChannel = CheckedBody(ByteReadChannel.Empty, {}) { cause }
    }
}
