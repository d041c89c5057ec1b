package lab.proxy.relay

import io.ktor.http.headersOf
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertTrue

class ForwardedHeadersTest {
    private val upstream = "http://nginx:80"

    @Test
    fun `request hop-by-hop, framing and connection-named headers stay behind`() {
        val incoming = headersOf(
            "Connection" to listOf("keep-alive, X-Secret"),
            "X-Secret" to listOf("1"),
            "Keep-Alive" to listOf("timeout=5"),
            "TE" to listOf("trailers"),
            "Trailer" to listOf("X-T"),
            "Transfer-Encoding" to listOf("chunked"),
            "Upgrade" to listOf("h2c"),
            "Proxy-Authorization" to listOf("Basic x"),
            "Proxy-Anything" to listOf("y"),
            "Content-Length" to listOf("10"),
            "Content-Type" to listOf("text/plain"),
            "Expect" to listOf("100-continue"),
            "Host" to listOf("spoofed.example"),
            "Accept" to listOf("*/*"),
            "X-Multi" to listOf("a", "b"),
        )
        val out = ForwardedHeaders.toUpstream(incoming, "10.0.0.9", "http")
        assertEquals(
            listOf(
                "Accept" to "*/*", "X-Multi" to "a", "X-Multi" to "b",
                "X-Forwarded-For" to "10.0.0.9", "X-Forwarded-Proto" to "http", "X-Forwarded-Host" to "spoofed.example",
            ),
            out,
        )
    }

    @Test
    fun `x-forwarded-for is appended to, not replaced`() {
        val out = ForwardedHeaders.toUpstream(headersOf("X-Forwarded-For", "1.1.1.1, 2.2.2.2"), "3.3.3.3", "http")
        assertTrue("X-Forwarded-For" to "1.1.1.1, 2.2.2.2, 3.3.3.3" in out)
    }

    @Test
    fun `response keeps end-to-end headers and makes upstream redirects relative`() {
        val out = ForwardedHeaders.toClient(
            headersOf(
                "Connection" to listOf("close"),
                "Keep-Alive" to listOf("timeout=5"),
                "Transfer-Encoding" to listOf("chunked"),
                "Content-Length" to listOf("5"),
                "ETag" to listOf("\"abc\""),
                "Location" to listOf("http://nginx:80/files/tiny.txt"),
            ),
            upstream,
        )
        assertEquals(listOf("ETag" to "\"abc\"", "Location" to "/files/tiny.txt"), out)
    }

    @Test
    fun `a redirect elsewhere, or to a host sharing the prefix, is left alone`() {
        for (location in listOf("https://other.example/x", "http://nginx:8080/x", "/already/relative")) {
            val out = ForwardedHeaders.toClient(headersOf("Location", location), upstream)
            assertEquals(listOf("Location" to location), out)
        }
    }
}
