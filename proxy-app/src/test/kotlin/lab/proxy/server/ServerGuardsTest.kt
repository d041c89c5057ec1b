package lab.proxy.server

import io.netty.buffer.ByteBuf
import io.netty.buffer.Unpooled
import io.netty.channel.ChannelHandlerContext
import io.netty.channel.ChannelInboundHandlerAdapter
import io.netty.channel.embedded.EmbeddedChannel
import io.netty.handler.codec.http.DefaultFullHttpResponse
import io.netty.handler.codec.http.DefaultHttpContent
import io.netty.handler.codec.http.DefaultHttpResponse
import io.netty.handler.codec.http.HttpContent
import io.netty.handler.codec.http.HttpResponse
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.HttpResponseStatus
import io.netty.handler.codec.http.HttpVersion
import io.netty.handler.codec.http.LastHttpContent
import io.netty.util.ReferenceCountUtil
import lab.proxy.config.ProxyConfig
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertTrue

/** The guards in a real Netty pipeline (an EmbeddedChannel with the proxy's codec), without Ktor. */
class ServerGuardsTest {
    /** What Ktor's handlers would get: every message after the guards. */
    private class Received : ChannelInboundHandlerAdapter() {
        val requests = mutableListOf<String>()
        var lastContents = 0

        override fun channelRead(ctx: ChannelHandlerContext, msg: Any) {
            if (msg is HttpRequest) requests += msg.uri()
            if (msg is LastHttpContent) lastContents++
            ReferenceCountUtil.release(msg)
        }
    }

    private fun channel(config: ProxyConfig = ProxyConfig()): Pair<EmbeddedChannel, Received> {
        val received = Received()
        val ch = EmbeddedChannel()
        ch.pipeline().addLast("codec", ServerCodec.create(4096, 8192, 8192))
        ServerGuards.install(ch.pipeline(), config)
        ch.pipeline().addLast(received)
        return ch to received
    }

    private fun EmbeddedChannel.send(text: String) = writeInbound(Unpooled.copiedBuffer(text, Charsets.ISO_8859_1))

    @Test
    fun `a caller's connection counts as open from its pipeline until it closes`() {
        val before = ServerGuards.openConnections.get()
        val channels = List(3) { channel().first }
        assertEquals(before + 3, ServerGuards.openConnections.get())
        channels[0].close()
        channels[1].close()
        assertEquals(before + 1, ServerGuards.openConnections.get())
        channels[2].close()
        assertEquals(before, ServerGuards.openConnections.get())
    }

    @Test
    fun `a body cut by the caller's close is marked before anything sees the end, a whole one is not`() {
        val (cut, _) = channel()
        cut.send("PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        assertFalse(ServerGuards.bodyCut(cut))
        cut.close()
        assertTrue(ServerGuards.bodyCut(cut))

        val (whole, received) = channel()
        whole.send("PUT /upload HTTP/1.1\r\nHost: lab\r\nContent-Length: 5\r\n\r\nhello")
        whole.close()
        assertFalse(ServerGuards.bodyCut(whole))
        assertEquals(1, received.lastContents)
    }

    /** What went out on the connection, as the caller reads it. */
    private fun EmbeddedChannel.written(): String {
        runPendingTasks()
        return generateSequence { readOutbound<ByteBuf>() }.joinToString("") { it.toString(Charsets.ISO_8859_1).also { _ -> it.release() } }
    }

    /** One whole refusal as the guard writes it: its status, `Connection: close`, and a text of its length. */
    private val refusal400 = Regex("HTTP/1.1 400 Bad Request\r\n(?:[^\r]+\r\n)*?content-length: (\\d+)\r\n(?:[^\r]+\r\n)*\r\n400 Bad Request: [^\n]+\n")

    private fun assertOneRefusal(text: String, what: String) {
        val match = refusal400.find(text)
        assertTrue(match != null && match.range.last == text.length - 1, "$what: $text")
        assertEquals(match.value.substringAfter("\r\n\r\n").length, match.groupValues[1].toInt(), text)
        assertTrue("connection: close" in match.value.lowercase(), text)
    }

    @Test
    fun `a refused request is answered by the guard and never handed on, nor anything after it`() {
        for (smuggling in listOf(
            // RFC 9112 6.3: two Content-Lengths, on HTTP/1.0 too, where Netty frames by the first
            "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\nContent-Length: 36\r\n\r\nhelloGET /smuggled HTTP/1.0\r\nHost: x\r\n\r\n",
            "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 36\r\nContent-Length: 5\r\n\r\nhelloGET /smuggled HTTP/1.0\r\nHost: x\r\n\r\n",
            // 6.1 and 6.3: Content-Length beside Transfer-Encoding; an empty Transfer-Encoding
            "POST /a HTTP/1.1\r\nHost: lab\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: lab\r\n\r\n",
            "POST /a HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: \r\nContent-Length: 5\r\n\r\nhelloGET /smuggled HTTP/1.1\r\nHost: lab\r\n\r\n",
            "POST /a HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: \r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: lab\r\n\r\n",
            // A space in a header name: refused by Netty's decoder itself
            "GET /bad HTTP/1.1\r\nHost: lab\r\nBad Header: x\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: lab\r\n\r\n",
            // 3.2: a Host that is not host[:port]
            "GET /a HTTP/1.1\r\nHost: x, evil.example\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: lab\r\n\r\n",
        )) {
            val (ch, received) = channel()
            val before = ServerGuards.refused.getValue(400).get()
            ch.send(smuggling)
            val written = ch.written()
            assertEquals(before + 1, ServerGuards.refused.getValue(400).get(), smuggling)
            assertEquals(emptyList(), received.requests, smuggling)
            assertTrue(written.startsWith("HTTP/1.1 400 "), written)
            assertOneRefusal(written, smuggling)
            assertFalse(ch.isOpen, smuggling)
            ch.finishAndReleaseAll()
        }
    }

    @Test
    fun `a refusal pipelined behind a request waits for its answer, then comes whole, then the close`() {
        val (ch, received) = channel()
        ch.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc")
        assertEquals(listOf("/a"), received.requests)
        assertEquals("", ch.written()) // nothing before the first answer
        assertTrue(ch.isOpen)
        ch.writeOutbound(DefaultHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.writeOutbound(DefaultHttpContent(Unpooled.copiedBuffer("first", Charsets.ISO_8859_1)))
        ch.writeOutbound(LastHttpContent.EMPTY_LAST_CONTENT)
        val written = ch.written()
        assertTrue(written.startsWith("HTTP/1.1 200 OK\r\n") && "first" in written, written)
        assertOneRefusal(written.substring(written.indexOf("HTTP/1.1 400")), "behind a POST")
        assertFalse(ch.isOpen)
        ch.finishAndReleaseAll()
    }

    @Test
    fun `pipelined requests go on one at a time unless all are safe and bodiless`() {
        val (ch, received) = channel()
        ch.send(
            "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
                "GET /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\nPUT /4 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz",
        )
        assertEquals(listOf("/1"), received.requests) // the GET waits for the POST's answer
        ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.runPendingTasks()
        assertEquals(listOf("/1", "/2", "/3"), received.requests) // two safe ones together
        ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.runPendingTasks()
        assertEquals(listOf("/1", "/2", "/3"), received.requests) // the PUT waits for both
        ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.runPendingTasks()
        assertEquals(listOf("/1", "/2", "/3", "/4"), received.requests)
        assertEquals(4, received.lastContents)
        ch.finishAndReleaseAll()
    }

    @Test
    fun `nothing after a request that says close is read, and the connection closes after its answer`() {
        val (ch, received) = channel()
        ch.send("GET /a HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: lab\r\n\r\n")
        assertEquals(listOf("/a"), received.requests)
        ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.runPendingTasks()
        assertEquals(listOf("/a"), received.requests)
        assertFalse(ch.isOpen)
        ch.finishAndReleaseAll()
    }

    @Test
    fun `an aborted answer never gets its last part, whenever it comes`() {
        val (ch, _) = channel()
        ch.send("GET /large HTTP/1.1\r\nHost: lab\r\n\r\n")
        ch.writeOutbound(DefaultHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.writeOutbound(DefaultHttpContent(Unpooled.copiedBuffer("part", Charsets.ISO_8859_1)))
        // The race: the mark is set, and Ktor's writer ends the body before the close is done.
        ServerGuards.markAborted(ch)
        val ended = ch.writeOneOutbound(LastHttpContent.EMPTY_LAST_CONTENT)
        ch.runPendingTasks()
        assertFalse(ended.isSuccess) // Ktor's writer learns its last part was not written
        val written = generateSequence { ch.readOutbound<Any>() }.toList()
        assertTrue(written.none { it is LastHttpContent }, written.toString())
        assertFalse(ch.isOpen) // and the guard closed the connection itself
        written.forEach { ReferenceCountUtil.release(it) }
    }

    @Test
    fun `a body whose framing the codec finds broken is marked before its end is seen, and nothing after it is read`() {
        for (broken in listOf("zz\r\n", "-1\r\n", "fffffffffffffffffff1\r\n", "5\nhello\n0\n\n", "5\r\nhelloXY0\r\n\r\n")) {
            val (ch, received) = channel()
            ch.send("PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            assertEquals(null, ServerGuards.framingBroken(ch))
            ch.send(broken + "GET /next HTTP/1.1\r\nHost: lab\r\n\r\n")
            assertTrue(ServerGuards.framingBroken(ch) != null, broken)
            assertFalse(ServerGuards.bodyCut(ch), broken) // a broken framing is not a cut: the caller still listens
            assertEquals(listOf("/upload"), received.requests, broken)
            assertEquals(1, received.lastContents, broken) // the body ends, and the verdict sees the mark
            ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.BAD_REQUEST))
            ch.runPendingTasks()
            assertFalse(ch.isOpen, broken)
            ch.finishAndReleaseAll()
        }
    }

    @Test
    fun `a whole chunked body is not marked broken`() {
        val (ch, received) = channel()
        ch.send("PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        assertEquals(null, ServerGuards.framingBroken(ch))
        assertEquals(1, received.lastContents)
        ch.finishAndReleaseAll()
    }

    @Test
    fun `a response that says Connection close is followed by the close`() {
        val (ch, _) = channel()
        ch.send("GET /a HTTP/1.1\r\nHost: lab\r\n\r\n")
        val response = DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.BAD_REQUEST)
        response.headers().set("Connection", "close")
        ch.writeOutbound(response)
        ch.runPendingTasks()
        assertFalse(ch.isOpen)
        ch.finishAndReleaseAll()

        val (open, _) = channel()
        open.send("GET /a HTTP/1.1\r\nHost: lab\r\n\r\n")
        open.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        open.runPendingTasks()
        assertTrue(open.isOpen)
        open.finishAndReleaseAll()
    }

    @Test
    fun `a framing that breaks after the answer was written closes the connection at once`() {
        val (ch, _) = channel()
        ch.send("PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        // The upstream answered without waiting for the body: the answer is written whole.
        ch.writeOutbound(DefaultFullHttpResponse(HttpVersion.HTTP_1_1, HttpResponseStatus.OK))
        ch.runPendingTasks()
        assertTrue(ch.isOpen)
        ch.send("zz\r\n")
        ch.runPendingTasks()
        assertFalse(ch.isOpen) // not held open until the idle timeout
        ch.finishAndReleaseAll()
    }
}
