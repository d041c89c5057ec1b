package lab.proxy.relay

import io.ktor.client.HttpClient
import io.ktor.client.engine.mock.MockEngine
import io.ktor.client.engine.mock.respond
import io.ktor.client.request.get
import io.ktor.client.request.prepareGet
import io.ktor.client.request.put
import io.ktor.client.request.setBody
import io.ktor.client.statement.bodyAsText
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpStatusCode
import io.ktor.http.content.OutgoingContent
import io.ktor.http.headersOf
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.put
import io.ktor.server.routing.routing
import io.ktor.server.testing.testApplication
import io.ktor.utils.io.ByteChannel
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.toByteArray
import io.ktor.utils.io.writeFully
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import java.io.IOException
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertIs
import kotlin.test.assertNotNull
import kotlin.test.assertNull
import kotlin.test.assertTrue

/**
 * [RelayedBodies] in-process, the streamed way down included: a mock engine is the upstream, a
 * real (test-engine) call is the caller's, and the answer is written into a channel here, since
 * Ktor's test engine does not wait for a streamed answer as Netty does. On the real server a
 * failure also aborts the caller's connection ([lab.proxy.server.ServerGuards.abort]; runner/tests/test_cut_bodies.py).
 */
class RelayedBodiesTest {
    private val big = ByteArray(300_000) { (it % 251).toByte() }

    /** What [RelayedBodies.answer] made of the upstream's answer, and what writing it gave. */
    private class Relayed(val content: OutgoingContent, val written: ByteArray, val writeError: Throwable?) {
        val failure: Throwable? get() = (content as? RelayedBodies.Streamed)?.failure
    }

    private fun relay(length: Long?, body: () -> ByteReadChannel): Relayed {
        var relayed: Relayed? = null
        testApplication {
            val headers = length?.let { headersOf(HttpHeaders.ContentLength, it.toString()) } ?: headersOf()
            val upstream = HttpClient(MockEngine { respond(body(), HttpStatusCode.OK, headers) })
            routing {
                get("/relay") {
                    upstream.prepareGet("http://upstream/files/big").execute { response ->
                        val content = RelayedBodies.answer(call, response, "http://upstream")
                        relayed = coroutineScope {
                            val sink = ByteChannel()
                            val read = async { sink.toByteArray() }
                            val error = runCatching {
                                when (content) {
                                    is OutgoingContent.WriteChannelContent -> content.writeTo(sink)
                                    is OutgoingContent.ByteArrayContent -> sink.writeFully(content.bytes())
                                    else -> Unit
                                }
                            }.exceptionOrNull()
                            sink.flushAndClose()
                            Relayed(content, read.await(), error)
                        }
                    }
                    call.respondText("relayed")
                }
            }
            try {
                assertEquals("relayed", client.get("/relay").bodyAsText())
            } finally {
                upstream.close()
            }
        }
        return relayed!!
    }

    @Test
    fun `a body larger than 64 KiB streams whole, counted against its Content-Length`() {
        val r = relay(big.size.toLong()) { twoPartSource(big) }
        assertIs<RelayedBodies.Streamed>(r.content)
        assertTrue(big.contentEquals(r.written), "relayed ${r.written.size} of ${big.size} bytes")
        assertNull(r.failure)
        assertNull(r.writeError)
    }

    @Test
    fun `an upstream body ended by a reset after the answer began is the copy's failure, which the abort acts on`() {
        // The streamed copy itself, its source ended by a reset after the answer began (through
        // the mock engine the timing of that end is the mock's, not the test's).
        val reset = IOException("reset by the upstream")
        var streamed: RelayedBodies.Streamed? = null
        var written = ByteArray(0)
        var writeError: Throwable? = null
        testApplication {
            routing {
                get("/relay") {
                    val rest = ByteChannel()
                    val first = ByteArray(RelayedBodies.SMALL) { 1 }
                    val body = RelayedBodies.Streamed(call, HttpStatusCode.OK, headersOf(), big.size.toLong(), null, first, first.size, rest)
                    coroutineScope {
                        val sink = ByteChannel()
                        val read = async { sink.toByteArray() }
                        launch {
                            rest.writeFully(big, 0, 100_000)
                            rest.flush()
                            rest.cancel(reset)
                        }
                        writeError = runCatching { body.writeTo(sink) }.exceptionOrNull()
                        sink.flushAndClose()
                        written = read.await()
                    }
                    streamed = body
                    call.respondText("relayed")
                }
            }
            assertEquals("relayed", client.get("/relay").bodyAsText())
        }
        val failure = assertNotNull(streamed!!.failure)
        assertTrue(generateSequence(failure) { it.cause }.any { it === reset }, failure.toString())
        // The copy ends without an error (on Netty the abort is what cuts the caller), having
        // passed on no more than came: the first part and at most the 100,000 bytes before the reset.
        assertNull(writeError)
        assertTrue(written.size in RelayedBodies.SMALL..RelayedBodies.SMALL + 100_000, "${written.size} bytes")
    }

    @Test
    fun `a body that ends cleanly short of its Content-Length is a cut body`() {
        val r = relay(big.size.toLong()) { twoPartSource(big.copyOf(200_000)) }
        assertIs<RelayedBodies.Streamed>(r.content)
        val failure = assertIs<CutBody>(r.failure)
        assertEquals("the upstream's body ended after 200000 of 300000 bytes", failure.message)
        assertEquals(200_000, r.written.size)
    }

    @Test
    fun `a body with no length streams whole, whatever its size`() {
        val r = relay(null) { twoPartSource(big) }
        assertIs<RelayedBodies.Streamed>(r.content) // its first half alone is more than 64 KiB
        assertTrue(big.contentEquals(r.written), "relayed ${r.written.size} of ${big.size} bytes")
        assertNull(r.failure)
    }

    @Test
    fun `the caller's body is handed to the engine once, a second read fails, never an empty body`() {
        var first = 0
        var second: Throwable? = null
        testApplication {
            routing {
                put("/upload") {
                    val body = RelayedBodies.CallerBody(call, 100_000, null)
                    first = body.readFrom().toByteArray().size
                    second = runCatching { body.readFrom().toByteArray() }.exceptionOrNull()
                    call.respondText("read")
                }
            }
            assertEquals("read", client.put("/upload") { setBody(ByteArray(100_000) { 7 }) }.bodyAsText())
        }
        assertEquals(100_000, first)
        val e = assertIs<CutBody>(second)
        assertEquals("the caller's body cannot be sent twice", e.message)
    }
}
