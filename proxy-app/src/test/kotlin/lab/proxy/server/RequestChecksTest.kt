package lab.proxy.server

import io.netty.buffer.Unpooled
import io.netty.channel.embedded.EmbeddedChannel
import io.netty.handler.codec.http.DefaultHttpHeadersFactory
import io.netty.handler.codec.http.DefaultHttpRequest
import io.netty.handler.codec.http.HttpMethod
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.HttpVersion
import io.netty.handler.codec.http.HttpResponseStatus
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertNull

/** The rules on request heads as the server's own codec decodes them from bytes. */
class RequestChecksTest {
    private fun head(text: String): HttpRequest {
        val channel = EmbeddedChannel(ServerCodec.create(4096, 8192, 8192))
        channel.writeInbound(Unpooled.copiedBuffer(text, Charsets.ISO_8859_1))
        val request = generateSequence { channel.readInbound<Any>() }.filterIsInstance<HttpRequest>().first()
        channel.finishAndReleaseAll()
        return request
    }

    private fun check(requestLine: String, vararg headers: String, body: String = ""): Refusal? =
        RequestChecks.refusal(head("$requestLine\r\n" + headers.joinToString("") { "$it\r\n" } + "\r\n" + body))

    private fun status(requestLine: String, vararg headers: String, body: String = "") = check(requestLine, *headers, body = body)?.status

    @Test
    fun `ordinary requests pass`() {
        assertNull(check("GET / HTTP/1.1", "Host: proxy"))
        assertNull(check("GET / HTTP/1.1", "Host: proxy", "Content-Length: 0"))
        assertNull(check("HEAD / HTTP/1.1", "Host: proxy:8080"))
        assertNull(check("POST / HTTP/1.1", "Host: [::1]:8080", "Transfer-Encoding: chunked"))
        assertNull(check("POST / HTTP/1.1", "Host: proxy", "Transfer-Encoding: , chunked")) // empty list elements are ignored (RFC 9110 5.6.1)
        assertNull(check("PUT / HTTP/1.1", "Host: 127.0.0.1", "Content-Length: 10"))
        assertNull(check("DELETE / HTTP/1.1", "Host: proxy", "Content-Length: 3"))
        assertNull(check("GET / HTTP/1.0"))
        assertNull(check("POST / HTTP/1.0", "Connection: keep-alive", "Content-Length: 5"))
        assertNull(check("GET / HTTP/1.2", "Host: proxy")) // a later minor version is read as 1.1 (RFC 9110 2.5)
    }

    @Test
    fun `more than one Content-Length is refused on HTTP 1_0 as on 1_1 (RFC 9112 6_3)`() {
        for (version in listOf("HTTP/1.0", "HTTP/1.1")) {
            for (lengths in listOf(listOf("5", "36"), listOf("36", "5"), listOf("5", "5"))) {
                val refusal = check("POST /a $version", "Host: x", *lengths.map { "Content-Length: $it" }.toTypedArray(), body = "hello")
                assertEquals(HttpResponseStatus.BAD_REQUEST, refusal?.status, "$version $lengths")
            }
            assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST /a $version", "Host: x", "Content-Length: 5, 5"), version)
            assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST /a $version", "Host: x", "Content-Length: +3"), version)
        }
    }

    @Test
    fun `a Transfer-Encoding that is empty or does not end with chunked once cannot be framed (RFC 9112 6_3)`() {
        for (te in listOf("", " ", ",", "xchunked", "gzip", "chunked, identity", "chunked,gzip", "chunked, chunked")) {
            assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST / HTTP/1.1", "Host: x", "Transfer-Encoding: $te"), te)
            assertEquals(
                HttpResponseStatus.BAD_REQUEST, status("POST / HTTP/1.1", "Host: x", "Transfer-Encoding: $te", "Content-Length: 5"), te,
            )
        }
    }

    @Test
    fun `another coding before chunked is not implemented`() {
        for (te in listOf("gzip, chunked", "deflate, gzip, chunked")) {
            assertEquals(HttpResponseStatus.NOT_IMPLEMENTED, status("POST / HTTP/1.1", "Host: x", "Transfer-Encoding: $te"), te)
        }
    }

    @Test
    fun `Transfer-Encoding beside Content-Length, or on HTTP 1_0, is refused (RFC 9112 6_1)`() {
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST / HTTP/1.1", "Host: x", "Transfer-Encoding: chunked", "Content-Length: 5"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST / HTTP/1.0", "Transfer-Encoding: chunked"))
    }

    @Test
    fun `TRACE and CONNECT are not forwarded, in any case`() {
        for (method in listOf("TRACE", "trace", "Trace", "CONNECT")) {
            assertEquals(HttpResponseStatus.METHOD_NOT_ALLOWED, status("$method /x HTTP/1.1", "Host: x"), method)
        }
    }

    @Test
    fun `Host is needed on HTTP 1_1, once, and must be host and port (RFC 9112 3_2)`() {
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1", "Host: x", "Host: y"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.0", "Host: x", "Host: y"))
        for (host in listOf("x, evil.example", "x,evil.example", "x evil.example", "x@evil.example", "x/y", "x:80:80", "[::1", "x:8a")) {
            assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1", "Host: $host"), host)
        }
    }

    @Test
    fun `a version other than HTTP 1_x is not served, and one written otherwise is malformed (RFC 9112 2_3)`() {
        assertEquals(HttpResponseStatus.HTTP_VERSION_NOT_SUPPORTED, status("GET / HTTP/2.0", "Host: x"))
        assertEquals(HttpResponseStatus.HTTP_VERSION_NOT_SUPPORTED, status("GET / HTTP/3.0", "Host: x"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / http/1.1", "Host: x"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / Http/1.0", "Host: x"))
    }

    @Test
    fun `what the decoder cannot read gets the status of its reason`() {
        assertEquals(HttpResponseStatus.REQUEST_URI_TOO_LONG, status("GET /${"a".repeat(65_536)} HTTP/1.1", "Host: x"))
        assertEquals(HttpResponseStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, status("GET / HTTP/1.1", "Host: x", "X-Big: ${"b".repeat(20_000)}"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1", "Host: x", "Bad Header: x"))
    }

    @Test
    fun `GET and HEAD with a body, control characters, odd targets and a bad Content-Type are refused`() {
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1", "Host: x", "Content-Length: 5"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("HEAD / HTTP/1.1", "Host: x", "Transfer-Encoding: chunked"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET / HTTP/1.1", "Host: x", "X-A: a\u0000b"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("GET /a/%2e%2e/%2e%2e/etc/passwd HTTP/1.1", "Host: x"))
        assertEquals(HttpResponseStatus.BAD_REQUEST, status("POST / HTTP/1.1", "Host: x", "Content-Type: /", "Content-Length: 0"))
    }

    @Test
    fun `CR, LF or NUL in a value is refused, however the headers were made`() {
        for (value in listOf("a\rb", "a\nInjected: 1", "a\u0000")) {
            val request = DefaultHttpRequest(HttpVersion.HTTP_1_1, HttpMethod.GET, "/", DefaultHttpHeadersFactory.headersFactory().withValidation(false).newHeaders())
            request.headers().set("Host", "x").set("X-A", value)
            assertEquals(HttpResponseStatus.BAD_REQUEST, RequestChecks.refusal(request)?.status, value)
        }
        assertNull(check("GET / HTTP/1.1", "Host: x", "X-A: plain value, with commas; and=signs"))
    }
}
