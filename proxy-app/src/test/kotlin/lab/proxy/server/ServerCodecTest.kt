package lab.proxy.server

import io.netty.buffer.Unpooled
import io.netty.channel.embedded.EmbeddedChannel
import io.netty.handler.codec.http.HttpContent
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.LastHttpContent
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertTrue

class ServerCodecTest {
    private fun decode(request: String): List<Any> {
        val channel = EmbeddedChannel(ServerCodec.create(4096, 8192, 8192))
        channel.writeInbound(Unpooled.copiedBuffer(request, Charsets.ISO_8859_1))
        return generateSequence { channel.readInbound<Any>() }.toList().also { channel.finishAndReleaseAll() }
    }

    @Test
    fun `a request with both framings keeps its Content-Length and is framed by Transfer-Encoding, or is refused`() {
        val messages = decode(
            "POST /upload HTTP/1.1\r\nHost: lab\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
                "3\r\nabc\r\n0\r\n\r\n",
        )
        val head = messages.first() as HttpRequest
        if (head.decoderResult().isFailure) {
            // Netty 4.2 (Ktor 3.5) refuses such a request itself: Ktor answers 400, ServerGuards closes.
            assertTrue(head.decoderResult().cause().message!!.contains("Content-Length"), head.decoderResult().toString())
            return
        }
        // Netty 4.1 (Ktor 3.4) frames it by Transfer-Encoding: Content-Length stays for RequestChecks.
        assertEquals("5", head.headers()["Content-Length"])
        assertEquals("chunked", head.headers()["Transfer-Encoding"])
        val body = messages.drop(1).filterIsInstance<HttpContent>().joinToString("") { it.content().toString(Charsets.ISO_8859_1) }
        assertEquals("abc", body)
        assertTrue(messages.last() is LastHttpContent)
    }

    @Test
    fun `other requests decode as with Netty's own codec`() {
        val messages = decode("PUT /x HTTP/1.1\r\nHost: lab\r\nContent-Length: 3\r\n\r\nxyz")
        val head = messages.first() as HttpRequest
        assertEquals("3", head.headers()["Content-Length"])
        val body = messages.drop(1).filterIsInstance<HttpContent>().joinToString("") { it.content().toString(Charsets.ISO_8859_1) }
        assertEquals("xyz", body)
    }
}
