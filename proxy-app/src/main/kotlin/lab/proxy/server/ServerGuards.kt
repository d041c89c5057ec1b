/**
 * Guards on the proxy's own server connections: two small Netty handlers around Ktor's HTTP codec.
 *
 * - A request whose first byte arrived must have all its headers within `SERVER_HEADER_TIMEOUT_MS`,
 *   and a connection with no request in progress is closed after `SERVER_IDLE_TIMEOUT_MS`: a
 *   thousand callers that send half a header and stop cannot hold the proxy's file descriptors.
 *   A request in progress is never cut by these: the upstream timeouts govern it.
 * - A caller's request body cut off by the caller (the connection closed, FIN or RST, before the
 *   body's end) reaches Ktor as an ordinary end of the body; the connection is marked [BODY_CUT]
 *   first, so the proxy aborts the upstream exchange instead of ending the body there.
 * - A request body whose framing Netty's decoder finds broken (a chunk size that is not hex, too
 *   long or negative, a bare LF, a chunk extension or trailer past the limits) ends with an empty
 *   last part that carries the failure, and Ktor 3.5's `RequestBodyHandler` takes any last part for
 *   the body's end. The connection is marked [FRAMING_BROKEN] first, with the decoder's reason: the
 *   proxy fails the upstream exchange, answers 400 and closes; nothing after it is read.
 * - A response that says `Connection: close` is followed by the close once it is written (RFC 9112
 *   section 9.6): a refused request whose body was never read must not be parsed as the next
 *   request, and Ktor's own 400s say close without closing.
 * - A request whose framing is in doubt (`Content-Length` beside `Transfer-Encoding`, or a transfer
 *   coding other than `chunked`) is the last one read on its connection: whatever follows it, a
 *   pipelined request too, is dropped unread, and [lab.proxy.relay.RequestChecks] refuses it and closes. A request
 *   Netty could not decode at all gets Ktor's 400 and the connection closes after it too.
 * - [abort]: an answer that cannot be finished never gets its last part (for a chunked body, the
 *   last chunk), however the close and Ktor's writer race; the connection closes instead.
 */
package lab.proxy.server

import io.ktor.server.application.ApplicationCall
import io.ktor.server.netty.NettyApplicationCall
import io.ktor.server.routing.RoutingCall
import io.ktor.server.routing.RoutingPipelineCall
import io.netty.buffer.ByteBuf
import io.netty.channel.Channel
import io.netty.channel.ChannelDuplexHandler
import io.netty.channel.ChannelFutureListener
import io.netty.channel.ChannelHandlerContext
import io.netty.channel.ChannelInboundHandlerAdapter
import io.netty.channel.ChannelPipeline
import io.netty.channel.ChannelPromise
import io.netty.handler.codec.http.HttpContent
import io.netty.handler.codec.http.HttpHeaderNames
import io.netty.handler.codec.http.HttpHeaderValues
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.HttpResponse
import io.netty.handler.codec.http.HttpStatusClass
import io.netty.handler.codec.http.HttpUtil
import io.netty.handler.codec.http.LastHttpContent
import io.netty.util.AttributeKey
import io.netty.util.ReferenceCountUtil
import lab.proxy.config.ProxyConfig
import java.nio.channels.ClosedChannelException
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

object ServerGuards {
    private val BODY_CUT: AttributeKey<Boolean> = AttributeKey.valueOf("lab.bodyCut")
    private val FRAMING_BROKEN: AttributeKey<String> = AttributeKey.valueOf("lab.framingBroken")
    private val CLOSE_AFTER_RESPONSE: AttributeKey<Boolean> = AttributeKey.valueOf("lab.closeAfterResponse")
    private val ABORTED: AttributeKey<Boolean> = AttributeKey.valueOf("lab.aborted")

    /**
     * The callers' connections accepted and not yet closed. A load generator's users keep theirs
     * open after the load stops (idle keep-alive, until SERVER_IDLE_TIMEOUT_MS): the leak check
     * leaves their file descriptors out, they are not the client's to release.
     */
    val openConnections = AtomicInteger()

    /** Adds the guards around Ktor's "codec" (HTTP/1.1 pipelines; others are left alone). */
    fun install(pipeline: ChannelPipeline, config: ProxyConfig) {
        openConnections.incrementAndGet()
        pipeline.channel().closeFuture().addListener { openConnections.decrementAndGet() }
        if (pipeline.get("codec") == null) return
        val state = ConnectionState(config.headerTimeoutMs, config.idleTimeoutMs)
        pipeline.addBefore("codec", "lab-bytes", BytesSeen(state))
        pipeline.addAfter("codec", "lab-messages", MessagesSeen(state))
    }

    /** True when the caller's connection closed before the body of its current request ended. */
    fun bodyCut(call: ApplicationCall): Boolean = call.nettyChannel()?.let(::bodyCut) == true

    internal fun bodyCut(channel: Channel): Boolean = channel.attr(BODY_CUT).get() == true

    /** Why the decoder found the current request body's framing broken; null while it is not. */
    fun framingBroken(call: ApplicationCall): String? = call.nettyChannel()?.let(::framingBroken)

    internal fun framingBroken(channel: Channel): String? = channel.attr(FRAMING_BROKEN).get()

    /**
     * Closes the caller's connection: an answer that cannot be finished must not end cleanly. The
     * close is queued on the connection's event loop, and Ktor's writer, which ends the body once
     * its channel closes (with an error too), can get there first: marked here, before that
     * channel closes, [MessagesSeen] drops the body's last part whenever it comes.
     */
    fun abort(call: ApplicationCall) {
        call.nettyChannel()?.let(::abort)
    }

    internal fun abort(channel: Channel) {
        markAborted(channel)
        channel.close()
    }

    /** The mark alone: what the writer sees when it gets there before the close does. */
    internal fun markAborted(channel: Channel) {
        channel.attr(ABORTED).set(true)
    }

    /** The connection under a call; a route's call wraps the engine's (null under a test engine). */
    private fun ApplicationCall.nettyChannel(): Channel? {
        val engineCall = ((this as? RoutingCall)?.pipelineCall ?: this as? RoutingPipelineCall)?.engineCall ?: this
        return (engineCall as? NettyApplicationCall)?.context?.channel()
    }

    /** Per connection; touched only on its event loop. */
    private class ConnectionState(val headerTimeoutMs: Long, val idleTimeoutMs: Long) {
        /** Requests received whose response is not written yet. */
        var active = 0
        var idleSince = System.nanoTime()

        /** When the first byte of a request arrived while none was in progress (0: none). */
        var partialSince = 0L

        /** A request body has started and not ended. */
        var bodyOpen = false

        /** A request whose framing is in doubt was read: nothing after it is. */
        var lastRequestRead = false
        var dropping = false
    }

    /** Before the codec: raw bytes, so a request that is still only a few header bytes is seen. */
    private class BytesSeen(private val state: ConnectionState) : ChannelInboundHandlerAdapter() {
        // Not channelActive: Ktor fires that from its codec onward, past this handler.
        override fun handlerAdded(ctx: ChannelHandlerContext) {
            state.idleSince = System.nanoTime()
            schedule(ctx, minOf(state.headerTimeoutMs, state.idleTimeoutMs))
        }

        override fun channelRead(ctx: ChannelHandlerContext, msg: Any) {
            if (msg is ByteBuf && state.active == 0 && state.partialSince == 0L && msg.isReadable) {
                state.partialSince = System.nanoTime()
            }
            super.channelRead(ctx, msg)
        }

        private fun schedule(ctx: ChannelHandlerContext, delayMs: Long) {
            ctx.executor().schedule({ check(ctx) }, delayMs.coerceAtLeast(1), TimeUnit.MILLISECONDS)
        }

        /** Closes the connection when a timeout has passed, else checks again when the next could. */
        private fun check(ctx: ChannelHandlerContext) {
            if (!ctx.channel().isActive) return
            val now = System.nanoTime()
            val left = when {
                state.active > 0 -> state.idleTimeoutMs
                state.partialSince != 0L -> state.headerTimeoutMs - (now - state.partialSince) / 1_000_000
                else -> state.idleTimeoutMs - (now - state.idleSince) / 1_000_000
            }
            if (left <= 0) ctx.close() else schedule(ctx, left)
        }
    }

    /** After the codec: whole requests in, responses out. */
    private class MessagesSeen(private val state: ConnectionState) : ChannelDuplexHandler() {
        override fun channelRead(ctx: ChannelHandlerContext, msg: Any) {
            if (state.dropping) {
                ReferenceCountUtil.release(msg)
                return
            }
            if (msg is HttpRequest) {
                state.active++
                state.partialSince = 0L
                ctx.channel().attr(BODY_CUT).set(false)
                ctx.channel().attr(FRAMING_BROKEN).set(null)
                if (msg.decoderResult().isFailure) {
                    // Netty could not decode it (Netty 4.2, under Ktor 3.5, refuses Content-Length
                    // beside Transfer-Encoding this way): Ktor answers 400 with `Connection: close`
                    // but leaves the connection open. Nothing after it is read, and the connection
                    // closes once that answer is written (RFC 9112 section 6.1's MUST for CL+TE).
                    ctx.channel().attr(CLOSE_AFTER_RESPONSE).set(true)
                    state.bodyOpen = false
                    state.dropping = true
                } else {
                    state.bodyOpen = msg !is LastHttpContent &&
                        (HttpUtil.isTransferEncodingChunked(msg) || HttpUtil.getContentLength(msg, 0L) > 0)
                    state.lastRequestRead = framingInDoubt(msg)
                }
            } else if (msg is HttpContent && msg.decoderResult().isFailure) {
                // Marked before Ktor's handlers see this last part, which they take for the body's end.
                val cause = msg.decoderResult().cause()
                ctx.channel().attr(FRAMING_BROKEN).set(cause?.message ?: cause?.javaClass?.simpleName ?: "invalid")
                ctx.channel().attr(CLOSE_AFTER_RESPONSE).set(true)
                state.bodyOpen = false
                state.dropping = true
                // Answered already (the upstream did not wait for the body): nothing is left to write.
                if (state.active == 0) ctx.close()
            } else if (msg is LastHttpContent) {
                state.bodyOpen = false
            }
            if (msg is LastHttpContent && state.lastRequestRead) state.dropping = true
            super.channelRead(ctx, msg)
        }

        /** `Content-Length` beside `Transfer-Encoding` ([ServerCodec] keeps both), or a coding other than chunked. */
        private fun framingInDoubt(request: HttpRequest): Boolean {
            val headers = request.headers()
            val codings = headers.getAll(HttpHeaderNames.TRANSFER_ENCODING)
            if (codings.isEmpty()) return false
            val chunkedOnly = codings.flatMap { it.split(",") }.map { it.trim().lowercase() } == listOf("chunked")
            return !chunkedOnly || headers.contains(HttpHeaderNames.CONTENT_LENGTH)
        }

        override fun channelInactive(ctx: ChannelHandlerContext) {
            // Before Ktor's handlers end the body channel, which they do as if the body were whole.
            if (state.bodyOpen) ctx.channel().attr(BODY_CUT).set(true)
            super.channelInactive(ctx)
        }

        override fun write(ctx: ChannelHandlerContext, msg: Any, promise: ChannelPromise) {
            if (msg is LastHttpContent && ctx.channel().attr(ABORTED).get() == true) {
                ReferenceCountUtil.release(msg)
                promise.setFailure(ClosedChannelException())
                ctx.close()
                return
            }
            val interim = msg is HttpResponse && msg.status().codeClass() == HttpStatusClass.INFORMATIONAL
            if (msg is HttpResponse && !interim && msg.headers().containsValue(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE, true)) {
                // RFC 9112 section 9.6: a server that sends "close" MUST close after that response.
                // Ktor's own 400 for a request it finds invalid says so and leaves the connection open.
                ctx.channel().attr(CLOSE_AFTER_RESPONSE).set(true)
            }
            if (msg !is LastHttpContent || interim) return super.write(ctx, msg, promise)
            val close = ctx.channel().attr(CLOSE_AFTER_RESPONSE).getAndSet(false) == true
            val done = promise.unvoid()
            super.write(ctx, msg, done)
            done.addListener {
                state.active = (state.active - 1).coerceAtLeast(0)
                state.idleSince = System.nanoTime()
            }
            if (close) done.addListener(ChannelFutureListener.CLOSE)
        }
    }
}
