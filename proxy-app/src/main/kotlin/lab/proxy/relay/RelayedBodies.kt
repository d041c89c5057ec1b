/**
 * The bodies the proxy relays, each checked so that a cut body never ends cleanly.
 *
 * Up: [CallerBody] hands the engine the caller's body as a [CheckedBody]: a channel that ends only
 * once the body is known whole, and fails every read when the caller's connection closed before
 * the body's end, its framing is invalid (a bad chunk size, a bare LF), or the body is short of its
 * `Content-Length` (see [CheckedBody] for why it never
 * closes instead). Down: [answer] reads a small body whole (up to [SMALL] bytes with
 * a known length) and answers with its bytes; a larger or unframed one streams ([Streamed]) after
 * its first bytes arrived, counted against its `Content-Length`. A short body found before the
 * answer starts is a 502; after, the exception drops the caller's connection. (A copy stops
 * quietly at a source closed with an error, so each checks `closedCause` after it.) A chunked body that
 * the engine ends as if complete cannot be told apart here: that is the engine's to see
 * (docs/studies/faults.md).
 */
package lab.proxy.relay

import io.ktor.client.statement.HttpResponse
import io.ktor.client.statement.bodyAsChannel
import io.ktor.http.ContentType
import io.ktor.http.Headers
import io.ktor.http.HeadersBuilder
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.http.content.OutgoingContent
import io.ktor.server.application.ApplicationCall
import io.ktor.server.request.httpMethod
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.ByteWriteChannel
import io.ktor.utils.io.readAvailable
import io.ktor.utils.io.readRemaining
import io.ktor.utils.io.writeFully
import kotlinx.io.readByteArray
import kotlinx.coroutines.CancellationException
import lab.proxy.server.ServerGuards
import java.io.IOException
import java.util.concurrent.atomic.AtomicBoolean

/** A body that ended before its end: never passed on as complete. */
class CutBody(message: String) : IOException(message)

object RelayedBodies {
    /** Bodies of a known length up to this are read whole and answered as bytes. */
    const val SMALL = 64 * 1024

    /** The caller's body, handed to the engine as it arrives; sent once at most. */
    class CallerBody(
        private val call: ApplicationCall,
        override val contentLength: Long?,
        override val contentType: ContentType?,
        private val watch: Watchdog.Watch? = null,
    ) : OutgoingContent.ReadChannelContent() {
        private val sent = AtomicBoolean()

        override fun readFrom(): ByteReadChannel {
            // An engine that retried would get an empty body: never let it pass as the caller's.
            if (!sent.compareAndSet(false, true)) return CheckedBody.failed(CutBody("the caller's body cannot be sent twice"))
            return CheckedBody(call.request.receiveChannel(), { watch?.progress() }) { received ->
                val broken = ServerGuards.framingBroken(call)
                when {
                    broken != null -> CutBody("the caller's body's framing is invalid after $received bytes: $broken")
                    ServerGuards.bodyCut(call) -> CutBody("the caller's body was cut off after $received bytes")
                    contentLength != null && received != contentLength ->
                        CutBody("the caller's body ended after $received of $contentLength bytes")
                    else -> null
                }
            }
        }
    }

    /** What the caller gets for [upstream]: status, end-to-end headers and the checked body. */
    suspend fun answer(call: ApplicationCall, upstream: HttpResponse, upstreamUrl: String, watch: Watchdog.Watch? = null): OutgoingContent {
        val status = upstream.status
        val headers = HeadersBuilder().apply {
            ForwardedHeaders.toClient(upstream.headers, upstreamUrl).forEach { (name, value) -> append(name, value) }
        }.build()
        val length = upstream.headers[HttpHeaders.ContentLength]?.toLongOrNull()
        val type = upstream.headers[HttpHeaders.ContentType]?.let { runCatching { ContentType.parse(it) }.getOrNull() }
        val bodiless = call.request.httpMethod == HttpMethod.Head || status.value in 100..199 ||
            status == HttpStatusCode.NoContent || status == HttpStatusCode.NotModified
        if (bodiless) return Bodiless(status, headers, length, type)

        val body = upstream.bodyAsChannel()
        if (length != null && length <= SMALL) {
            val bytes = body.readRemaining(length).readByteArray()
            if (bytes.size.toLong() != length) throw CutBody("the upstream's body ended after ${bytes.size} of $length bytes")
            return Whole(status, headers, type, bytes)
        }
        val first = ByteArray(SMALL)
        val n = body.readAvailable(first, 0, first.size).coerceAtLeast(0)
        if (body.isClosedForRead) {
            body.closedCause?.let { throw it }
            if (length != null && n.toLong() != length) throw CutBody("the upstream's body ended after $n of $length bytes")
            return Whole(status, headers, type, first.copyOf(n))
        }
        return Streamed(call, status, headers, length, type, first, n, body, watch)
    }

    /** A body read whole before the answer: its length is exact. */
    private class Whole(
        override val status: HttpStatusCode,
        override val headers: Headers,
        override val contentType: ContentType?,
        private val bytes: ByteArray,
    ) : OutgoingContent.ByteArrayContent() {
        override val contentLength: Long get() = bytes.size.toLong()
        override fun bytes(): ByteArray = bytes
    }

    /**
     * The rest of a body, copied while the upstream response is open, then counted. On any failure
     * the caller's connection is aborted here ([ServerGuards.abort]: its last part is then never
     * written), and the copy ends without an error, [failure] saying why. Two things in Ktor 3.4's
     * Netty writer make that order the only safe one:
     * - it ends a chunked body cleanly when its channel closes, with an error too; so the copy is not
     *   `copyTo`, which closes its destination with the source's error before it throws: the writer
     *   then raced the abort and now and then won (a cut body passed as whole, 19 of 600 through
     *   per-call OkHttp in one run, 1-3 in others, for every engine but Apache);
     * - closed with an error while it holds a buffer it has read but not written, it drops that
     *   buffer unreleased (`respondWithBigBody`: Netty's leak detector reported it on cut bodies).
     *   Closed cleanly after the abort, it writes what it holds to the closed connection, which
     *   releases it.
     */
    class Streamed(
        private val call: ApplicationCall,
        override val status: HttpStatusCode,
        override val headers: Headers,
        override val contentLength: Long?,
        override val contentType: ContentType?,
        private val first: ByteArray,
        private val firstSize: Int,
        private val rest: ByteReadChannel,
        private val watch: Watchdog.Watch? = null,
    ) : OutgoingContent.WriteChannelContent() {
        /** Why the body could not be relayed whole (the caller's connection was aborted); null when it was. */
        @Volatile
        var failure: Throwable? = null
            private set

        override suspend fun writeTo(channel: ByteWriteChannel) {
            try {
                channel.writeFully(first, 0, firstSize)
                var total = firstSize.toLong()
                while (true) {
                    val n = rest.readAvailable(first, 0, first.size)
                    if (n < 0) break
                    channel.writeFully(first, 0, n)
                    channel.flush()
                    watch?.progress()
                    total += n
                }
                // readAvailable ends quietly at a source closed with an error: the engine's error is the cut.
                rest.closedCause?.let { throw it }
                if (contentLength != null && total != contentLength) {
                    throw CutBody("the upstream's body ended after $total of $contentLength bytes")
                }
            } catch (e: Throwable) {
                ServerGuards.abort(call)
                failure = e
                if (e is CancellationException) throw e
            }
        }
    }

    /** A response without a body (HEAD, 1xx, 204, 304): status, headers and the announced length. */
    private class Bodiless(
        override val status: HttpStatusCode,
        override val headers: Headers,
        override val contentLength: Long?,
        override val contentType: ContentType?,
    ) : OutgoingContent.NoContent()
}
