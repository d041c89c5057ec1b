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
package lab.proxy

import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.InternalAPI
import kotlinx.io.Buffer

@OptIn(InternalAPI::class)
class CheckedBody(
    private val source: ByteReadChannel,
    /** Called whenever bytes move from the source (the request timeout counts from the last). */
    private val progress: () -> Unit = {},
    /** Called once the source has ended, with the bytes it gave: null when whole, else why not. */
    private val verdict: (received: Long) -> Throwable?,
) : ByteReadChannel {
    private val buffer = Buffer()
    private var received = 0L

    /** Set once the source has ended: [WHOLE], or the error every read throws from then on. */
    @Volatile
    private var end: Throwable? = null

    override val closedCause: Throwable? get() = null

    override val isClosedForRead: Boolean
        get() = buffer.exhausted() && ended() === WHOLE

    override val readBuffer: Buffer
        get() {
            pull()
            if (buffer.exhausted()) failure()?.let { throw it }
            return buffer
        }

    override suspend fun awaitContent(min: Int): Boolean {
        while (true) {
            pull()
            if (buffer.size >= min) return true
            when (val e = ended()) {
                null -> try {
                    source.awaitContent(min - buffer.size.toInt())
                } catch (cause: Throwable) {
                    end = cause
                    throw cause
                }
                WHOLE -> return buffer.size >= min
                else -> throw e // never "no more": to some callers that reads as the body's end
            }
        }
    }

    override fun cancel(cause: Throwable?) {
        source.cancel(cause)
        buffer.close()
    }

    /** Moves what the source holds into [buffer], counting it. */
    private fun pull() {
        if (end != null || source.closedCause != null) return
        val moved = buffer.transferFrom(source.readBuffer)
        if (moved > 0) progress()
        received += moved
    }

    /** Null while the source may give more; once it has ended, [WHOLE] or the error. */
    private fun ended(): Throwable? {
        end?.let { return it }
        if (!source.isClosedForRead) return null
        synchronized(this) {
            end?.let { return it }
            val judged = source.closedCause ?: verdict(received) ?: WHOLE
            end = judged
            return judged
        }
    }

    private fun failure(): Throwable? = ended()?.takeIf { it !== WHOLE }

    companion object {
        /** The mark of a source that ended whole (never thrown). */
        private val WHOLE = Throwable("whole")

        /** A body that fails its first read with [cause]: nothing of it may be sent. */
        fun failed(cause: Throwable): ByteReadChannel = CheckedBody(ByteReadChannel.Empty, {}) { cause }
    }
}
