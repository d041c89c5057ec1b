package lab.proxy.client

import lab.proxy.config.BuildInfo
import lab.proxy.config.ConfigException
import lab.proxy.config.Engine
import lab.proxy.config.Limits
import lab.proxy.config.ProxyConfig
import lab.proxy.config.RetryOnStale
import java.io.File
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertTrue

class EngineSetupTest {
    private fun settings(engine: Engine, retry: RetryOnStale = RetryOnStale.ON, limits: Limits = Limits.FAIR) =
        ClientFactory.effectiveSettings(ProxyConfig(engine = engine, retryOnStale = retry, limits = limits, maxConnections = 77))

    @Test
    fun `retry on stale connections is one setting, reported per engine as in force`() {
        val built = EngineSetup.built()
        val on = built.associateWith { settings(it)["retry_on_stale"] }
        val off = built.associateWith { settings(it, RetryOnStale.OFF)["retry_on_stale"] }
        assertEquals(
            mapOf(Engine.CIO to "n/a", Engine.APACHE to "none", Engine.APACHE5 to "on", Engine.OKHTTP to "on", Engine.JAVA to "always")
                .filterKeys { it in built },
            on,
        )
        assertEquals(
            // Java's is the JDK's own, not per client.
            mapOf(Engine.CIO to "n/a", Engine.APACHE to "none", Engine.APACHE5 to "off", Engine.OKHTTP to "off", Engine.JAVA to "always")
                .filterKeys { it in built },
            off,
        )
        val engines = mapOf(Engine.OKHTTP to "engine:on", Engine.APACHE5 to "engine").filterKeys { it in built } // Ktor's defaults
        assertEquals(engines, engines.mapValues { (engine, _) -> settings(engine, RetryOnStale.ENGINE)["retry_on_stale"] })
    }

    @Test
    fun `fair limits are read back from the engines' own configuration`() {
        assertEquals("77", settings(Engine.CIO)["max_connections_per_route"])
        assertEquals("77", settings(Engine.OKHTTP)["dispatcher_max_requests_per_host"])
        assertEquals("off", settings(Engine.CIO)["pipelining"])
        // Without pipelining CIO keeps no connection, so no keep-alive applies: n/a, not a value.
        assertEquals("n/a", settings(Engine.CIO)["keep_alive_ms"])
        assertEquals("5000", ClientFactory.effectiveSettings(ProxyConfig(engine = Engine.CIO, pipelining = true))["keep_alive_ms"])
        // CLIENT_LIMITS=defaults: the engines' own, as studies measured them.
        assertEquals("100", settings(Engine.CIO, limits = Limits.DEFAULTS)["max_connections_per_route"])
        assertEquals("5", settings(Engine.OKHTTP, limits = Limits.DEFAULTS)["dispatcher_max_requests_per_host"])
    }

    @Test
    fun `every engine builds a client and reports the shared settings`() {
        for (engine in EngineSetup.built()) {
            val config = ProxyConfig(engine = engine)
            EngineSetup.of(engine).create(config).close()
            val reported = ClientFactory.effectiveSettings(config)
            for (key in listOf("limits", "connect_timeout_ms", "request_timeout_ms", "retry_on_stale", "header_timeout_ms", "upstream_body")) {
                assertTrue(key in reported, "$engine: $key")
            }
        }
    }

    @Test
    fun `the build holds every engine its Ktor release publishes, and names the release for one it lacks`() {
        val release = BuildInfo.ktorVersion
        // ktor-releases.tsv: the engines each release publishes (the module's parent folder holds it).
        val line = File("../ktor-releases.tsv").readLines()
            .map { it.trim().split(Regex("\\s+")) }
            .firstOrNull { !it[0].startsWith("#") && it[0] == release && it.size >= 3 }
            ?: error("ktor-releases.tsv has no line for $release")
        val published = line[2].split(",")
        assertEquals(Engine.entries.filter { it.id in published }, EngineSetup.built())
        for (missing in Engine.entries.filter { it.id !in published }) {
            val error = assertFailsWith<ConfigException> { EngineSetup.of(missing) }
            assertTrue("Ktor $release does not publish the ${missing.id} engine" in error.message!!, error.message)
        }
    }

    @Test
    fun `OkHttp and Apache5 expose their pools, the others say they do not`() {
        val built = EngineSetup.built()
        val exposed = built.associateWith { settings(it)["pool_metrics"] }
        assertEquals(
            mapOf(
                Engine.CIO to "not exposed", Engine.APACHE to "not exposed", Engine.APACHE5 to "exposed",
                Engine.OKHTTP to "exposed", Engine.JAVA to "not exposed",
            ).filterKeys { it in built },
            exposed,
        )
        assertEquals("on", ClientFactory.effectiveSettings(ProxyConfig(pipelining = true))["pipelining"])
    }

    @Test
    fun `a client's pool is counted from its creation until it is closed`() {
        for (engine in listOf(Engine.OKHTTP, Engine.APACHE5)) {
            val before = ClientPools.size
            val client = EngineSetup.of(engine).create(ProxyConfig(engine = engine))
            assertEquals(before + 1, ClientPools.size, "$engine")
            client.close()
            kotlinx.coroutines.runBlocking { client.coroutineContext[kotlinx.coroutines.Job]!!.join() }
            assertEquals(before, ClientPools.size, "$engine")
        }
    }
}
