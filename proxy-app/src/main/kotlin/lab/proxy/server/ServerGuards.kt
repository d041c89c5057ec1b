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
 * - A request [RequestChecks] refuses is answered here, after the answers before it on the
 *   connection, with its status and `Connection: close`; it never reaches Ktor, and nothing after it
 *   on the connection is read as a request. Then the connection closes in stages (RFC 9112 section
 *   9.6): the write side first, the rest of what the caller sent read and dropped for up to
 *   [LINGER_MS], so the answer is not lost to a reset.
 * - Pipelined requests that are not all safe (RFC 9110 section 9.2.1) go to Ktor one at a time:
 *   Ktor handles pipelined requests at once, so a GET behind a POST could reach the upstream before
 *   the POST. A request waits here until the answers before it are written.
 * - A response that says `Connection: close` is followed by the close once it is written (RFC 9112
 *   section 9.6), and a request that says it (or an HTTP/1.0 one without keep-alive) is the last
 *   one read on its connection.
 * - [abort]: an answer that cannot be finished never gets its last part (for a chunked body, the
 *   last chunk), however the close and Ktor's writer race; the connection closes instead.
 */
package lab.proxy.server

import io.ktor.server.application.ApplicationCall
import io.ktor.server.netty.NettyApplicationCall
import io.ktor.server.routing.RoutingCall
import io.ktor.server.routing.RoutingPipelineCall
import io.netty.buffer.ByteBuf
import io.netty.buffer.Unpooled
import io.netty.channel.Channel
import io.netty.channel.ChannelDuplexHandler
import io.netty.channel.ChannelHandlerContext
import io.netty.channel.ChannelInboundHandlerAdapter
import io.netty.channel.ChannelPipeline
import io.netty.channel.ChannelPromise
import io.netty.channel.socket.DuplexChannel
import io.netty.handler.codec.http.DefaultFullHttpResponse
import io.netty.handler.codec.http.HttpContent
import io.netty.handler.codec.http.HttpHeaderNames
import io.netty.handler.codec.http.HttpHeaderValues
import io.netty.handler.codec.http.HttpMethod
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.HttpResponse
import io.netty.handler.codec.http.HttpStatusClass
import io.netty.handler.codec.http.HttpUtil
import io.netty.handler.codec.http.HttpVersion
import io.netty.handler.codec.http.LastHttpContent
import io.netty.util.AttributeKey
import io.netty.util.ReferenceCountUtil
import lab.proxy.config.ProxyConfig
import java.nio.channels.ClosedChannelException
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicLong

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

    /** Requests refused here, by status ([RequestChecks.STATUSES]). */
    val refused: Map<Int, AtomicLong> = RequestChecks.STATUSES.associate { it.code() to AtomicLong() }

    /** How long a closing connection still reads what the caller sends, after its last answer. */
    const val LINGER_MS = 2_000L

    /** Methods that change nothing (RFC 9110 section 9.2.1); TRACE is refused. */
    private val SAFE = setOf(HttpMethod.GET, HttpMethod.HEAD, HttpMethod.OPTIONS)

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
        /** Requests handed to Ktor whose response is not written yet, and whether each is safe, in order. */
        val inFlight = ArrayDeque<Boolean>()
        val active: Int get() = inFlight.size
        var idleSince = System.nanoTime()

        /** When the first byte of a request arrived while none was in progress (0: none). */
        var partialSince = 0L

        /** The body of the request Ktor reads has started and not ended. */
        var bodyOpen = false

        /** Messages read and not yet handed to Ktor: a pipelined request that waits, and what follows it. */
        val held = ArrayDeque<Any>()

        /** The request being read is the last one on the connection: nothing after it is. */
        var lastRequest = false

        /** Nothing more read is handed on. */
        var dropping = false

        /** A refusal to answer once the requests before it are answered (they are all handed on). */
        var refusal: Refusal? = null
        var refusedHead = false
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
                state.partialSince = 0L
                val refusal = RequestChecks.refusal(msg)
                if (refusal != null) {
                    state.refusal = refusal
                    state.refusedHead = msg.method() == HttpMethod.HEAD
                    ReferenceCountUtil.release(msg)
                    drop(ctx)
                    handOn(ctx)
                    return
                }
                // RFC 9112 section 9.6: no request after one that said "close" is processed.
                state.lastRequest = !HttpUtil.isKeepAlive(msg)
            }
            val brokenBody = msg is HttpContent && msg !is HttpRequest && msg.decoderResult().isFailure
            if (state.held.isEmpty() && (msg !is HttpRequest || mayStart(msg))) deliver(ctx, msg) else state.held.addLast(msg)
            if (brokenBody || (msg is LastHttpContent && state.lastRequest)) drop(ctx)
        }

        /** A request may go to Ktor now: nothing in flight, or it and all those in flight may run beside others. */
        private fun mayStart(request: HttpRequest): Boolean =
            state.active == 0 || (besideOthers(request) && state.inFlight.all { it })

        /** Safe and without a body: nothing it does can change what a request beside it finds or reads. */
        private fun besideOthers(request: HttpRequest): Boolean = request.method() in SAFE &&
            !HttpUtil.isTransferEncodingChunked(request) && HttpUtil.getContentLength(request, 0L) == 0L

        /** Hands [msg] to Ktor's handlers, with the marks they read for the request it belongs to. */
        private fun deliver(ctx: ChannelHandlerContext, msg: Any) {
            if (msg is HttpRequest) {
                state.inFlight.addLast(besideOthers(msg))
                ctx.channel().attr(BODY_CUT).set(false)
                ctx.channel().attr(FRAMING_BROKEN).set(null)
                state.bodyOpen = msg !is LastHttpContent &&
                    (HttpUtil.isTransferEncodingChunked(msg) || HttpUtil.getContentLength(msg, 0L) > 0)
            } else if (msg is HttpContent && msg.decoderResult().isFailure) {
                // Marked before Ktor's handlers see this last part, which they take for the body's end.
                val cause = msg.decoderResult().cause()
                ctx.channel().attr(FRAMING_BROKEN).set(cause?.message ?: cause?.javaClass?.simpleName ?: "invalid")
                ctx.channel().attr(CLOSE_AFTER_RESPONSE).set(true)
                state.bodyOpen = false
                // Answered already (the upstream did not wait for the body): nothing is left to write.
                if (state.active == 0) ctx.close()
            } else if (msg is LastHttpContent) {
                state.bodyOpen = false
            }
            ctx.fireChannelRead(msg)
        }

        /**
         * Hands on what waited and may start now, then answers the refusal once nothing is in flight.
         * Run on the event loop outside Ktor's own calls (after a response is written).
         */
        private fun handOn(ctx: ChannelHandlerContext) {
            if (!ctx.channel().isActive) return
            var handed = false
            while (state.held.isNotEmpty()) {
                val next = state.held.first()
                if (next is HttpRequest && !mayStart(next)) break
                deliver(ctx, state.held.removeFirst())
                handed = true
            }
            if (handed) ctx.fireChannelReadComplete() // Ktor flushes and reads on from there
            val refusal = state.refusal
            if (refusal != null && state.held.isEmpty() && state.active == 0) {
                state.refusal = null
                answer(ctx, refusal, state.refusedHead)
            }
        }

        /** Nothing read from now on is handed on; what waits still is, and the connection closes after the last answer. */
        private fun drop(ctx: ChannelHandlerContext) {
            state.dropping = true
            if (state.active == 0 && state.held.isEmpty() && state.refusal == null && ctx.channel().isActive) closeInStages(ctx)
        }

        /** Every answer is written and nothing more will be read: the connection's end. */
        private fun finished(): Boolean = state.dropping && state.active == 0 && state.held.isEmpty() && state.refusal == null

        override fun channelInactive(ctx: ChannelHandlerContext) {
            // Before Ktor's handlers end the body channel, which they do as if the body were whole.
            if (state.bodyOpen) ctx.channel().attr(BODY_CUT).set(true)
            releaseHeld()
            super.channelInactive(ctx)
        }

        override fun handlerRemoved(ctx: ChannelHandlerContext) = releaseHeld()

        private fun releaseHeld() {
            while (state.held.isNotEmpty()) ReferenceCountUtil.release(state.held.removeFirst())
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
                state.inFlight.removeFirstOrNull()
                state.idleSince = System.nanoTime()
                // An answer that said close, or the last one on a connection that reads no more: the end.
                // Otherwise what waited goes on, outside Ktor's writer that wrote this.
                if (close || finished()) {
                    state.dropping = true // nothing read while it closes is a request
                    closeInStages(ctx)
                } else {
                    ctx.executor().execute { handOn(ctx) }
                }
            }
        }
    }

    /** A refusal's whole answer, then the close. */
    private fun answer(ctx: ChannelHandlerContext, refusal: Refusal, head: Boolean) {
        val text = "${refusal.status.code()} ${refusal.status.reasonPhrase()}: ${refusal.reason}\n".toByteArray(Charsets.UTF_8)
        val response = DefaultFullHttpResponse(
            HttpVersion.HTTP_1_1, refusal.status, if (head) Unpooled.EMPTY_BUFFER else Unpooled.wrappedBuffer(text),
        )
        response.headers()
            .set(HttpHeaderNames.CONTENT_TYPE, "text/plain; charset=UTF-8")
            .set(HttpHeaderNames.CONTENT_LENGTH, text.size)
            .set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE)
        refused.getValue(refusal.status.code()).incrementAndGet()
        ctx.writeAndFlush(response).addListener { closeInStages(ctx) }
    }

    /**
     * RFC 9112 section 9.6: the write side first, then what the caller still sends is read and
     * dropped until it closes or [LINGER_MS] pass, so a reset does not take the last answer with it.
     */
    private fun closeInStages(ctx: ChannelHandlerContext) {
        val channel = ctx.channel()
        if (channel !is DuplexChannel || !channel.isActive) {
            ctx.close()
            return
        }
        channel.shutdownOutput().addListener {
            channel.config().isAutoRead = true // Ktor reads on demand; nothing asks any more
            ctx.executor().schedule({ ctx.close() }, LINGER_MS, TimeUnit.MILLISECONDS)
        }
    }
}
