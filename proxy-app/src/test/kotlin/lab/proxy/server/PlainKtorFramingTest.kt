package lab.proxy.server

import io.ktor.server.application.Application
import io.ktor.server.engine.EmbeddedServer
import io.ktor.server.engine.connector
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import io.ktor.server.netty.NettyApplicationEngine
import io.ktor.server.request.httpMethod
import io.ktor.server.request.receiveText
import io.ktor.server.request.uri
import io.ktor.server.response.respondText
import io.ktor.server.routing.route
import io.ktor.server.routing.routing
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeoutOrNull
import lab.proxy.config.ProxyConfig
import java.net.Socket
import java.util.concurrent.ConcurrentLinkedQueue
import kotlin.test.AfterTest
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertTrue

/**
 * The reproductions docs/proxy.md cites: what plain Ktor on Netty (3.5.2, Netty 4.2.16; a route and
 * nothing else) does with the requests the lab's guards refuse, beside the same server with the
 * guards. Each `plain` assertion holds the dependency's behaviour: it fails when Ktor or Netty
 * change it, and the page is then to be read again.
 */
class PlainKtorFramingTest {
    private val seen = ConcurrentLinkedQueue<String>()
    private val servers = mutableListOf<EmbeddedServer<NettyApplicationEngine, NettyApplicationEngine.Configuration>>()

    /** A server whose one route records each request it handles, as `METHOD uri body`. */
    private fun server(guarded: Boolean, module: Application.() -> Unit = { recordEverything() }): Int {
        val server = embeddedServer(Netty, configure = {
            connector { host = "127.0.0.1"; port = 0 }
            if (guarded) {
                channelPipelineConfig = { ServerGuards.install(this, ProxyConfig()) }
                httpServerCodec = { ServerCodec.create(maxInitialLineLength, maxHeaderSize, maxChunkSize) }
            }
        }, module = module).start(wait = false)
        servers += server
        return runBlocking { server.engine.resolvedConnectors().first().port }
    }

    private fun Application.recordEverything() = routing {
        route("{...}") {
            handle {
                seen += "${call.request.httpMethod.value} ${call.request.uri} ${call.receiveText()}"
                call.respondText("ok")
            }
        }
    }

    @AfterTest
    fun stop() = servers.forEach { it.stop(100, 1000) }

    /** [request] on a fresh connection; all that comes back within 2 s. */
    private fun exchange(port: Int, request: String): String = Socket("127.0.0.1", port).use { s ->
        s.soTimeout = 2_000
        s.getOutputStream().write(request.toByteArray(Charsets.ISO_8859_1))
        val out = StringBuilder()
        runCatching {
            val buffer = ByteArray(65_536)
            while (true) {
                val n = s.getInputStream().read(buffer)
                if (n < 0) break
                out.append(String(buffer, 0, n, Charsets.ISO_8859_1))
            }
        }
        out.toString()
    }

    private fun statuses(reply: String) = Regex("HTTP/\\d\\.\\d (\\d{3}) ").findAll(reply).map { it.groupValues[1].toInt() }.toList()

    private val twoLengths = "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\nContent-Length: 31\r\n\r\n" +
        "helloGET /smuggled HTTP/1.0\r\n\r\n"

    @Test
    fun `HTTP 1_0 with two Content-Lengths, Netty frames by the first and reads a second request from the body`() {
        assertEquals(listOf(200, 200), statuses(exchange(server(guarded = false), twoLengths)))
        // In either order: plain Ktor handles the two at once (the pipelining test below).
        assertEquals(setOf("POST /a hello", "GET /smuggled "), seen.toSet())
        seen.clear()
        assertEquals(listOf(400), statuses(exchange(server(guarded = true), twoLengths)))
        assertEquals(emptyList(), seen.toList())
    }

    @Test
    fun `an empty Transfer-Encoding, Netty reads no body, and the caller's chunks are lost or read as a request`() {
        val emptyCoding = "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        val plain = exchange(server(guarded = false), emptyCoding)
        assertEquals(200, statuses(plain).first(), plain)
        assertEquals("POST /a ", seen.first())
        seen.clear()
        assertEquals(listOf(400), statuses(exchange(server(guarded = true), emptyCoding)))
        assertEquals(emptyList(), seen.toList())
    }

    @Test
    fun `a target past the line limit, Ktor answers 400, not RFC 9112's 414`() {
        val long = "GET /${"a".repeat(65_536)} HTTP/1.1\r\nHost: x\r\n\r\n"
        val plain = exchange(server(guarded = false), long)
        assertEquals(listOf(400), statuses(plain), plain)
        assertEquals(listOf(414), statuses(exchange(server(guarded = true), long)))
    }

    @Test
    fun `a Host that is not host and port, and HTTP 2_0 on the request line, are served`() {
        for (request in listOf("GET /a HTTP/1.1\r\nHost: x, evil.example\r\n\r\n", "GET /a HTTP/2.0\r\nHost: x\r\n\r\n")) {
            val plain = exchange(server(guarded = false), request)
            assertTrue(Regex("HTTP/\\d\\.\\d 200 ").containsMatchIn(plain), plain)
            val guarded = exchange(server(guarded = true), request)
            assertTrue(statuses(guarded).single() in setOf(400, 505), guarded)
        }
        assertEquals(2, seen.size)
    }

    @Test
    fun `pipelined requests, Ktor handles a GET while the POST before it is still running`() {
        // The POST's handler waits (1 s at most) for the GET's: it finishes early only if both run at once.
        fun Application.postWaitsForGet() {
            val getRan = CompletableDeferred<Unit>()
            routing {
                route("{...}") {
                    handle {
                        if (call.request.httpMethod.value == "GET") getRan.complete(Unit)
                        else seen += if (withTimeoutOrNull(1_000) { getRan.await() } != null) "together" else "one at a time"
                        call.respondText("ok")
                    }
                }
            }
        }
        val pipelined = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
        assertEquals(listOf(200, 200), statuses(exchange(server(guarded = false) { postWaitsForGet() }, pipelined)))
        assertEquals(listOf(200, 200), statuses(exchange(server(guarded = true) { postWaitsForGet() }, pipelined)))
        assertEquals(listOf("together", "one at a time"), seen.toList())
    }
}
