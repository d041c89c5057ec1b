package lab.proxy.relay

import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.http.headersOf
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertNull

class RequestChecksTest {
    private fun check(method: String, vararg headers: Pair<String, String>, version: String = "HTTP/1.1") =
        RequestChecks.refusal(HttpMethod.parse(method), version, headersOf(*(arrayOf("Host" to "proxy") + headers).map { it.first to listOf(it.second) }.toTypedArray()))

    @Test
    fun `ordinary requests pass`() {
        assertNull(check("GET"))
        assertNull(check("GET", "Content-Length" to "0"))
        assertNull(check("HEAD"))
        assertNull(check("POST", "Transfer-Encoding" to "chunked"))
        assertNull(check("PUT", "Content-Length" to "10"))
        assertNull(check("DELETE", "Content-Length" to "3"))
    }

    @Test
    fun `GET and HEAD with a body are refused and the connection closed`() {
        for (refusal in listOf(
            check("GET", "Content-Length" to "5"),
            check("HEAD", "Content-Length" to "5"),
            check("GET", "Transfer-Encoding" to "chunked"),
        )) {
            assertEquals(HttpStatusCode.BadRequest, refusal?.status)
            assertEquals(true, refusal?.close)
        }
    }

    @Test
    fun `a transfer coding that does not end with chunked cannot be framed and closes (RFC 9112 6_1)`() {
        for (te in listOf("xchunked", "gzip", "chunked, identity", "chunked,gzip", "chunked, chunked")) {
            val refusal = check("POST", "Transfer-Encoding" to te)
            assertEquals(HttpStatusCode.BadRequest, refusal?.status, te)
            assertEquals(true, refusal?.close, te)
        }
    }

    @Test
    fun `another coding before chunked is not implemented and closes`() {
        for (te in listOf("gzip, chunked", "deflate, gzip, chunked")) {
            val refusal = check("POST", "Transfer-Encoding" to te)
            assertEquals(HttpStatusCode.NotImplemented, refusal?.status, te)
            assertEquals(true, refusal?.close, te)
        }
    }

    @Test
    fun `Content-Length beside Transfer-Encoding is refused and closes`() {
        val refusal = check("POST", "Transfer-Encoding" to "chunked", "Content-Length" to "5")
        assertEquals(HttpStatusCode.BadRequest, refusal?.status)
        assertEquals(true, refusal?.close)
    }

    @Test
    fun `TRACE and CONNECT are not forwarded`() {
        assertEquals(HttpStatusCode.MethodNotAllowed, check("TRACE")?.status)
        assertEquals(HttpStatusCode.MethodNotAllowed, check("CONNECT")?.status)
    }

    @Test
    fun `HTTP 1_1 needs a Host, HTTP 1_0 does not`() {
        val noHost = RequestChecks.refusal(HttpMethod.Get, "HTTP/1.1", headersOf())
        assertEquals(HttpStatusCode.BadRequest, noHost?.status)
        assertNull(RequestChecks.refusal(HttpMethod.Get, "HTTP/1.0", headersOf()))
    }

    @Test
    fun `control characters in a header are refused`() {
        assertEquals(HttpStatusCode.BadRequest, check("GET", "X-A" to "a\r\nb")?.status)
    }
}
