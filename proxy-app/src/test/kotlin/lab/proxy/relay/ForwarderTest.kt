package lab.proxy.relay

import io.ktor.client.HttpClient
import io.ktor.client.engine.mock.MockEngine
import io.ktor.client.engine.mock.MockRequestHandleScope
import io.ktor.client.engine.mock.respond
import io.ktor.client.plugins.DefaultRequest
import io.ktor.client.request.HttpRequestData
import io.ktor.client.request.HttpResponseData
import io.ktor.client.request.get
import io.ktor.client.request.header
import io.ktor.client.request.put
import io.ktor.client.request.request
import io.ktor.client.request.setBody
import io.ktor.client.statement.bodyAsText
import io.ktor.client.statement.readRawBytes
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.http.headersOf
import io.ktor.server.testing.ApplicationTestBuilder
import io.ktor.server.testing.testApplication
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.toByteArray
import kotlinx.coroutines.delay
import lab.proxy.client.ClientProvider
import lab.proxy.client.labCommon
import lab.proxy.config.Lifetime
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.ProxyMetrics
import lab.proxy.module
import java.util.concurrent.CopyOnWriteArrayList
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertNull
import kotlin.test.assertTrue

/**
 * The proxy's forwarding rules in-process: Ktor's test server in front, a mock engine as the
 * upstream (the lab's client settings on it). What is the network's is tested against real nginx
 * and the fault server in runner/tests.
 */
class ForwarderTest {
    private val config = ProxyConfig(upstreamUrl = "http://upstream:80/base", requestTimeoutMs = 300)
    private val seen = CopyOnWriteArrayList<HttpRequestData>()

    private fun ApplicationTestBuilder.proxy(handler: suspend MockRequestHandleScope.(HttpRequestData) -> HttpResponseData): ProxyMetrics {
        val metrics = ProxyMetrics(config)
        val engine = MockEngine { request ->
            seen += request
            handler(request)
        }
        val clients = ClientProvider.create(Lifetime.SINGLETON, metrics.counters) { HttpClient(engine) { labCommon(config) } }
        application { module(config, metrics, clients) }
        return metrics
    }

    /** A caller as a browser is: it sends Host (Ktor's test client does not by itself). */
    private fun ApplicationTestBuilder.caller(follow: Boolean = true): HttpClient = createClient {
        followRedirects = follow
        install(DefaultRequest) { header(HttpHeaders.Host, "lab") }
    }

    @Test
    fun `the target, the method and end-to-end headers reach the upstream, hop-by-hop ones and Host do not`() = testApplication {
        proxy { respond("ok", HttpStatusCode.OK, headersOf(HttpHeaders.ContentType, "text/plain")) }
        val r = caller().get("/a/b?x=1&y=%2F") {
            header("X-Custom", "kept")
            header(HttpHeaders.Connection, "X-Drop")
            header("X-Drop", "dropped: named by Connection")
            header("Keep-Alive", "timeout=5")
        }
        assertEquals("ok", r.bodyAsText())
        val up = seen.single()
        assertEquals("/base/a/b?x=1&y=%2F", up.url.encodedPathAndQuery)
        assertEquals(HttpMethod.Get, up.method)
        assertEquals("kept", up.headers["X-Custom"])
        for (name in listOf("X-Drop", "Keep-Alive", HttpHeaders.Connection)) assertNull(up.headers[name], name)
        assertTrue(up.headers["X-Forwarded-For"] != null && up.headers["X-Forwarded-Proto"] == "http")
    }

    @Test
    fun `the upstream's status and headers come back, and a redirect to the upstream becomes the proxy's path`() = testApplication {
        proxy {
            respond("", HttpStatusCode.Found, headersOf(HttpHeaders.Location, "http://upstream:80/base/files/tiny.txt"))
        }
        val r = caller(follow = false).get("/redirect")
        assertEquals(HttpStatusCode.Found, r.status)
        assertEquals("/files/tiny.txt", r.headers[HttpHeaders.Location])
    }

    @Test
    fun `a small body short of its Content-Length is a 502, never an answer`() = testApplication {
        proxy { respond(ByteReadChannel("half"), HttpStatusCode.OK, headersOf(HttpHeaders.ContentLength, "1000")) }
        val r = caller().get("/short")
        assertEquals(HttpStatusCode.BadGateway, r.status)
        assertTrue("upstream exchange failed" in r.bodyAsText())
    }

    @Test
    fun `an upstream that never answers is a 504 at the request timeout, from the proxy's own watchdog`() = testApplication {
        val metrics = proxy {
            delay(5_000)
            respond("late")
        }
        val t0 = System.nanoTime()
        val r = caller().get("/hang")
        val ms = (System.nanoTime() - t0) / 1_000_000
        assertEquals(HttpStatusCode.GatewayTimeout, r.status)
        assertTrue(ms in 300..3_000, "answered after $ms ms")
        assertTrue("lab_upstream_requests_seconds_count{" in metrics.scrape() && "outcome=\"timeout\"" in metrics.scrape())
    }

    @Test
    fun `a body up to 64 KiB is read whole and answered with its length`() = testApplication {
        val body = ByteArray(RelayedBodies.SMALL) { (it % 251).toByte() }
        proxy { respond(ByteReadChannel(body), HttpStatusCode.OK, headersOf(HttpHeaders.ContentLength, body.size.toString())) }
        val r = caller().get("/files/64k")
        assertEquals(HttpStatusCode.OK, r.status)
        assertEquals(body.size.toString(), r.headers[HttpHeaders.ContentLength])
        assertTrue(body.contentEquals(r.readRawBytes()))
        // (A larger body streams: Ktor's test engine does not wait for a streamed answer as Netty
        // does, so that is the real server's to show: runner/tests/test_proxy_cases.py, 100 MB.)
    }

    @Test
    fun `an upload reaches the upstream whole, with its length`() = testApplication {
        proxy { request ->
            val got = request.body.toByteReadChannelBytes()
            respond("""{"bytes": ${got.size}}""")
        }
        val r = caller().put("/upload") { setBody(ByteArray(100_000) { 1 }) }
        assertEquals("""{"bytes": 100000}""", r.bodyAsText())
        assertEquals("100000", seen.single().body.contentLength?.toString())
    }

    @Test
    fun `a target that climbs above the root is refused before any upstream call, where no guard runs`() = testApplication {
        proxy { respond("should not be called") }
        assertEquals(HttpStatusCode.BadRequest, caller().get("/a/%2e%2e/%2e%2e/etc/passwd").status)
        // (The other refusals are the server's guards', on Netty: RequestChecksTest, ServerGuardsTest
        // and runner/tests/test_proxy_safety.py hold them, through the server's real codec.)
        assertFalse(seen.any(), "nothing reached the upstream")
    }

    private suspend fun io.ktor.http.content.OutgoingContent.toByteReadChannelBytes(): ByteArray = when (this) {
        is io.ktor.http.content.OutgoingContent.ReadChannelContent -> readFrom().toByteArray()
        is io.ktor.http.content.OutgoingContent.ByteArrayContent -> bytes()
        else -> ByteArray(0)
    }
}
