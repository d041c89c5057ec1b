package lab.proxy

import io.ktor.client.request.get
import io.ktor.client.statement.bodyAsText
import io.ktor.http.HttpStatusCode
import io.ktor.server.testing.testApplication
import lab.proxy.client.ClientFactory
import lab.proxy.config.Engine
import lab.proxy.config.Lifetime
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.ProxyMetrics
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertTrue

class ApplicationTest {
    private val config = ProxyConfig(engine = Engine.OKHTTP, lifetime = Lifetime.PER_CALL, upstreamUrl = "http://127.0.0.1:9")

    @Test
    fun `health and metrics are answered by the proxy, not forwarded`() = testApplication {
        application { module(config) }
        val health = client.get("/health")
        assertEquals(HttpStatusCode.OK, health.status)
        assertEquals("ok per-call-okhttp\n", health.bodyAsText())

        val metrics = client.get("/metrics").bodyAsText()
        assertTrue("lab_proxy_info{" in metrics, metrics.take(500))
        assertTrue("""case="per-call-okhttp"""" in metrics)
        assertTrue("""dispatcher_max_requests_per_host="1000"""" in metrics)
        assertTrue("lab_threads_active_unparked{" in metrics)
    }

    @Test
    fun `a traversal is refused before any client is made`() = testApplication {
        val metrics = ProxyMetrics(config)
        application { module(config, metrics) }
        val response = client.get("/a/%2e%2e/%2e%2e/etc/passwd")
        assertEquals(HttpStatusCode.BadRequest, response.status)
        assertEquals(0, metrics.counters.created.get())
    }

    @Test
    fun `the startup summary names the case and every effective setting`() {
        val line = startupSummary(config)
        assertTrue("case=per-call-okhttp" in line, line)
        for ((k, v) in ClientFactory.effectiveSettings(config)) assertTrue("$k=$v" in line, k)
    }

    @Test
    fun `a busy port or a bad host gives one line naming the variable`() {
        val inUse = bindFailure(java.io.IOException("bind(..) failed with error(-98): Address already in use"), config)
        assertTrue(inUse != null && "set PORT" in inUse, inUse)
        val badHost = bindFailure(java.nio.channels.UnresolvedAddressException(), config.copy(host = "nope.invalid"))
        assertTrue(badHost != null && "HOST='nope.invalid'" in badHost, badHost)
        assertEquals(null, bindFailure(IllegalStateException("other"), config))
    }
}
