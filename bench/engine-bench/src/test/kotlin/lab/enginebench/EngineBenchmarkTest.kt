package lab.enginebench

import lab.plain.PlainClients
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientPart
import lab.proxy.config.Engine
import lab.proxy.config.ProxyConfig

import io.ktor.server.engine.embeddedServer
import io.ktor.server.plugins.origin
import io.ktor.server.netty.Netty
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.routing
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import java.util.concurrent.atomic.AtomicInteger
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertTrue

class EngineBenchmarkTest {
    /** A real server that answers after 50 ms and remembers the most requests it held at once. */
    private fun withCountingServer(block: (url: String, maxInFlight: () -> Int) -> Unit) =
        withCountingServer { url, maxInFlight, _ -> block(url, maxInFlight) }

    /** The same, also counting the connections its requests came on (their client ports). */
    private fun withCountingServer(block: (url: String, maxInFlight: () -> Int, connections: () -> Int) -> Unit) {
        val inFlight = AtomicInteger()
        val max = AtomicInteger()
        val ports = java.util.concurrent.ConcurrentHashMap.newKeySet<Int>()
        val server = embeddedServer(Netty, port = 0, host = "127.0.0.1") {
            routing {
                get("/slow") {
                    ports.add(call.request.origin.remotePort)
                    max.accumulateAndGet(inFlight.incrementAndGet(), ::maxOf)
                    delay(50)
                    inFlight.decrementAndGet()
                    call.respondText("ok")
                }
            }
        }.start(wait = false)
        val port = runBlocking { server.engine.resolvedConnectors().first().port }
        try {
            block("http://127.0.0.1:$port/slow", { max.get() }, { ports.size })
        } finally {
            server.stop(100, 1_000)
        }
    }

    @Test
    fun `a batch keeps at most the limit in flight`() = withCountingServer { url, maxInFlight ->
        ClientFactory.create(ProxyConfig(engine = Engine.CIO)).use { client ->
            val result = runBlocking { runBatch(client, url, 40, 5) }
            assertEquals(0, result.failures)
            assertEquals(40L * 2, result.bytes)
            assertTrue(maxInFlight() in 3..5, "at most 5 in flight, saw ${maxInFlight()}")
            // 40 requests of 50 ms, 5 at a time: at least 8 rounds
            assertTrue(result.seconds >= 0.4, "took ${result.seconds} s")
        }
    }

    @Test
    fun `concurrency 0 launches the whole batch at once, as the published benchmark did`() =
        withCountingServer { url, maxInFlight ->
            ClientFactory.create(ProxyConfig(engine = Engine.CIO)).use { client ->
                val result = runBlocking { runBatch(client, url, 40, 0) }
                assertEquals(0, result.failures)
                assertTrue(maxInFlight() > 5, "all at once, saw ${maxInFlight()}")
            }
        }

    @Test
    fun `a plain client reads as a user's code does, and every read gets the whole body`() =
        withCountingServer { url, _ ->
            for ((client, read) in listOf(
                PlainClients.plain("okhttp") to Read.TEXT,
                PlainClients.withLimits("apache5", 10) to Read.TEXT,
                ClientFactory.create(ProxyConfig(engine = Engine.JAVA), setOf(ClientPart.LIMITS, ClientPart.FLAGS)) to Read.RAW,
            )) {
                client.use {
                    val result = runBlocking { runBatch(it, url, 10, 5, read) }
                    assertEquals(0, result.failures)
                    assertEquals(10L * 2, result.bytes)
                }
            }
        }

    @Test
    fun `OkHttp's plain client holds 5 requests per host in flight, with the lab's limit as many as asked`() =
        withCountingServer { url, maxInFlight ->
            PlainClients.plain("okhttp").use { runBlocking { runBatch(it, url, 40, 0, Read.TEXT) } }
            assertEquals(5, maxInFlight())
        }

    @Test
    fun `OkHttp's plain client with the lab's limit holds more than 5 in flight`() =
        withCountingServer { url, maxInFlight ->
            PlainClients.withLimits("okhttp", 20).use { runBlocking { runBatch(it, url, 40, 0, Read.TEXT) } }
            assertTrue(maxInFlight() in 6..20, "saw ${maxInFlight()}")
        }

    @Test
    fun `the client, its parts and the read are options`() {
        val plain = BenchmarkOptions.parse(arrayOf("--engine", "cio", "--url", "http://h/x", "--client", "plain"))
        assertEquals("plain" to Read.TEXT, plain.client to plain.read)
        val rung = BenchmarkOptions.parse(
            arrayOf("--engine", "cio", "--url", "http://h/x", "--parts", "limits,flags", "--read", "raw"),
        )
        assertEquals(setOf(ClientPart.LIMITS, ClientPart.FLAGS), LabClient.parts(rung))
        assertEquals(Read.RAW, rung.read)
        for (bad in listOf(
            arrayOf("--client", "lean"), arrayOf("--parts", "limits,pool"), arrayOf("--read", "lines"),
            arrayOf("--limits", "tight"), arrayOf("--pipelining", "yes"), arrayOf("--pipelining", "on", "--client", "plain"),
            arrayOf("--pipelining", "on", "--engine", "okhttp"),
        )) {
            assertFailsWith<OptionException>(bad.joinToString(" ")) {
                BenchmarkOptions.parse(arrayOf("--engine", "cio", "--url", "http://h/x", *bad))
            }
        }
    }

    @Test
    fun `options are parsed and bad ones refused with the usage`() {
        val o = BenchmarkOptions.parse(arrayOf("--engine", "okhttp", "--url", "http://h/x", "--concurrency", "0"))
        assertEquals(BenchmarkOptions("okhttp", "http://h/x", concurrency = 0), o)
        for (bad in listOf(
            arrayOf("--engine", "netty", "--url", "http://h/x"),
            arrayOf("--engine", "cio"),
            arrayOf("--engine", "cio", "--url", "http://h/x", "--batches", "0"),
            arrayOf("--engine", "cio", "--url", "http://h/x", "--threads", "4"),
            arrayOf("--engine"),
        )) {
            val e = assertFailsWith<OptionException>(bad.joinToString(" ")) { BenchmarkOptions.parse(bad) }
            assertTrue("usage: --engine" in e.message!!, e.message)
        }
    }

    @Test
    fun `CIO opens a connection per request, and with pipelining on fewer, every request answered or timed out`() =
        withCountingServer { url, _, connections ->
            PlainClients.withLimits("cio", 100).use { runBlocking { runBatch(it, url, 40, 5, Read.TEXT) } }
            val dedicated = connections()
            assertEquals(40, dedicated)
            // On 3.5.2 some pipelined requests are never answered (KTOR-7009): the timeout ends them.
            val result = PlainClients.pipelined("cio", 100).use { runBlocking { runBatch(it, url, 40, 5, Read.TEXT, 2_000) } }
            val pipelined = connections() - dedicated
            assertTrue(pipelined < 40, "40 requests, 5 in flight, pipelined: $pipelined connections")
            assertEquals(40L - result.failures, result.bytes / 2, "every answered request read whole")
            assertTrue(result.timeouts <= result.failures)
            val options = BenchmarkOptions.parse(arrayOf("--engine", "cio", "--url", url, "--pipelining", "on"))
            assertEquals("on", ClientFactory.effectiveSettings(LabClient.config(options))["pipelining"])
        }

    @Test
    fun `a request without an answer within the timeout is a failure and a timeout, and the batch ends`() =
        withCountingServer { url, _ ->
            PlainClients.withLimits("okhttp", 10).use {
                val result = runBlocking { runBatch(it, url, 10, 5, Read.TEXT, timeoutMs = 10) } // the server waits 50 ms
                assertEquals(10 to 10, result.failures to result.timeouts)
            }
        }
}
