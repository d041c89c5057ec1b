package lab.proxy.config

import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.CsvSource
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertTrue

class ProxyConfigTest {
    @Test
    fun `defaults match the documented contract`() {
        val config = ProxyConfig.fromEnv(emptyMap())
        assertEquals(Engine.CIO, config.engine)
        assertEquals(Lifetime.SINGLETON, config.lifetime)
        assertEquals("http://nginx:80", config.upstreamUrl)
        assertEquals("0.0.0.0", config.host)
        assertEquals(8080, config.port)
        assertEquals(1000, config.maxConnections)
        assertEquals(5_000, config.connectTimeoutMs)
        assertEquals(30_000, config.requestTimeoutMs)
        assertEquals(false, config.accessLog)
        assertEquals(Limits.FAIR, config.limits)
        assertEquals(RetryOnStale.ON, config.retryOnStale)
        assertEquals(10_000L to 60_000L, config.headerTimeoutMs to config.idleTimeoutMs)
        assertEquals("singleton-cio", config.caseName)
    }

    @Test
    fun `the client's dispatcher is read, and refused where it cannot apply, in one line`() {
        assertEquals(ClientDispatcher.Io, ProxyConfig.fromEnv(emptyMap()).dispatcher)
        assertEquals(ClientDispatcher.IoPool(512), ProxyConfig.fromEnv(mapOf("CLIENT_DISPATCHER" to "io:512")).dispatcher)
        val bad = assertFailsWith<ConfigException> { ProxyConfig.fromEnv(mapOf("CLIENT_DISPATCHER" to "io:0")) }
        assertEquals("CLIENT_DISPATCHER='io:0' is not valid; valid values: ${ClientDispatcher.ACCEPTS}", bad.message)
        for (engine in listOf("apache", "apache5")) {
            val refused = assertFailsWith<ConfigException> {
                ProxyConfig.fromEnv(mapOf("CLIENT_ENGINE" to engine, "CLIENT_DISPATCHER" to "io:128"))
            }
            assertTrue("its I/O reactor runs its own threads" in refused.message!!, refused.message)
        }
        val jdk = Runtime.version().feature()
        val virtual = runCatching { ProxyConfig.fromEnv(mapOf("CLIENT_ENGINE" to "okhttp", "CLIENT_DISPATCHER" to "virtual")) }
        if (jdk < ProxyConfig.VIRTUAL_THREADS_JDK) {
            assertEquals(
                "CLIENT_DISPATCHER=virtual needs JDK 21 or later; this JVM is $jdk: run the proxy on a newer JDK or use " +
                    "CLIENT_DISPATCHER=io",
                virtual.exceptionOrNull()?.message,
            )
        } else {
            assertEquals(ClientDispatcher.Virtual, virtual.getOrThrow().dispatcher)
        }
    }

    @Test
    fun `blank values take the default`() {
        assertEquals(ProxyConfig(), ProxyConfig.fromEnv(mapOf("CLIENT_ENGINE" to " ", "PORT" to "")))
    }

    @Test
    fun `every engine and lifetime is accepted, case-insensitively`() {
        for (engine in Engine.entries) for (lifetime in Lifetime.entries) {
            val config = ProxyConfig.fromEnv(
                mapOf("CLIENT_ENGINE" to engine.id.uppercase(), "CLIENT_LIFETIME" to lifetime.id),
            )
            assertEquals(engine to lifetime, config.engine to config.lifetime)
            assertEquals("${lifetime.id}-${engine.id}", config.caseName)
        }
    }

    @Test
    fun `all variables are read`() {
        val config = ProxyConfig.fromEnv(
            mapOf(
                "CLIENT_ENGINE" to "okhttp", "CLIENT_LIFETIME" to "per-call", "UPSTREAM_URL" to "http://up:81/base/",
                "HOST" to "127.0.0.1", "PORT" to "9000", "CLIENT_MAX_CONNECTIONS" to "64",
                "CLIENT_CONNECT_TIMEOUT_MS" to "250", "CLIENT_REQUEST_TIMEOUT_MS" to "750", "ACCESS_LOG" to "on",
                "CLIENT_LIMITS" to "Defaults", "CLIENT_RETRY_ON_STALE" to "off", "SERVER_HEADER_TIMEOUT_MS" to "2000",
                "SERVER_IDLE_TIMEOUT_MS" to "30000",
            ),
        )
        assertEquals(
            ProxyConfig(Engine.OKHTTP, Lifetime.PER_CALL, "http://up:81/base", "127.0.0.1", 9000, 64, 250, 750, true,
                Limits.DEFAULTS, RetryOnStale.OFF, 2_000, 30_000,
            ),
            config,
        )
    }

    @ParameterizedTest(name = "{0}={1}")
    @CsvSource(
        delimiter = '|',
        value = [
            "CLIENT_ENGINE|netty|cio, apache, apache5, okhttp, java",
            "CLIENT_ENGINE|ktor-cio|cio, apache, apache5, okhttp, java",
            "CLIENT_LIFETIME|per_call|singleton, per-call",
            "CLIENT_LIFETIME|pooled|singleton, per-call",
            "UPSTREAM_URL|nginx:80|an http:// or https:// URL",
            "UPSTREAM_URL|ftp://nginx|an http:// or https:// URL",
            "UPSTREAM_URL|http://nginx/?a=1|an http:// or https:// URL",
            "UPSTREAM_URL|http:///path|an http:// or https:// URL",
            "UPSTREAM_URL|http://nginx:0|a port from 1 to 65535",
            "UPSTREAM_URL|http://nginx:99999|a port from 1 to 65535",
            "HOST|0.0.0.0/0|an IP address or host name",
            "PORT|0|an integer from 1 to 65535",
            "PORT|70000|an integer from 1 to 65535",
            "PORT|http|an integer from 1 to 65535",
            "CLIENT_MAX_CONNECTIONS|0|an integer from 1 to 100000",
            "CLIENT_MAX_CONNECTIONS|-5|an integer from 1 to 100000",
            "CLIENT_MAX_CONNECTIONS|1e3|an integer from 1 to 100000",
            "CLIENT_CONNECT_TIMEOUT_MS|0|an integer from 1 to 3600000",
            "CLIENT_REQUEST_TIMEOUT_MS|30s|an integer from 1 to 3600000",
            "ACCESS_LOG|yes|on, off",
            "CLIENT_LIMITS|none|fair, defaults",
            "CLIENT_RETRY_ON_STALE|yes|on, off, engine",
            "SERVER_HEADER_TIMEOUT_MS|50|an integer from 100 to 3600000",
            "SERVER_IDLE_TIMEOUT_MS|0|an integer from 100 to 3600000",
            "CLIENT_HTTP_VERSION|3|1.1, 2",
            "CLIENT_TLS_VERSION|1.1|1.2, 1.3",
            "UPSTREAM_CA_FILE|/no/such/ca.pem|a readable PEM file",
            "CLIENT_PIPELINING|yes|on, off",
            "UPSTREAM_RTT_MS|20ms|whole milliseconds from 0 to 10000",
            "UPSTREAM_RTT_MS|-1|whole milliseconds from 0 to 10000",
            "UPSTREAM_RTT_MS|10001|whole milliseconds from 0 to 10000",
            "UPSTREAM_JITTER_MS|1.5|whole milliseconds from 0 to UPSTREAM_RTT_MS",
            "UPSTREAM_BANDWIDTH_KBPS|fast|KB/s from 0 (not limited) to 10000000",
        ],
    )
    fun `a bad value names the variable and the valid values`(name: String, value: String, valid: String) {
        val error = assertFailsWith<ConfigException> { ProxyConfig.fromEnv(mapOf(name to value)) }
        val message = error.message!!
        assertTrue(message.startsWith("$name='$value' is not valid"), message)
        assertTrue(valid in message, message)
    }

    @Test
    fun `every variable has a description`() {
        val documented = ProxyConfig.VARIABLES.keys
        assertEquals(
            setOf(
                "CLIENT_ENGINE", "CLIENT_LIFETIME", "UPSTREAM_URL", "HOST", "PORT", "CLIENT_MAX_CONNECTIONS",
                "CLIENT_LIMITS", "CLIENT_CONNECT_TIMEOUT_MS", "CLIENT_REQUEST_TIMEOUT_MS", "ACCESS_LOG",
                "CLIENT_RETRY_ON_STALE", "SERVER_HEADER_TIMEOUT_MS", "SERVER_IDLE_TIMEOUT_MS",
                "UPSTREAM_CA_FILE", "CLIENT_HTTP_VERSION", "CLIENT_TLS_VERSION", "CLIENT_PIPELINING", "CLIENT_DISPATCHER",
                "UPSTREAM_RTT_MS", "UPSTREAM_JITTER_MS", "UPSTREAM_BANDWIDTH_KBPS",
            ),
            documented,
        )
    }

    @Test
    fun `an https upstream is trusted through the CA it is given, and HTTP 2 and a TLS version need https`() {
        val ca = kotlin.io.path.createTempFile("ca", ".pem").toFile().apply { writeText("-----BEGIN CERTIFICATE-----\n"); deleteOnExit() }
        val https = ProxyConfig.fromEnv(
            mapOf("UPSTREAM_URL" to "https://nginx:8443", "UPSTREAM_CA_FILE" to ca.path, "CLIENT_HTTP_VERSION" to "2", "CLIENT_TLS_VERSION" to "1.3"),
        )
        assertEquals(Triple("https", HttpVersion.HTTP_2, TlsVersion.TLS_1_3), Triple(https.scheme, https.httpVersion, https.tlsVersion))
        for ((env, names) in listOf(
            mapOf("UPSTREAM_URL" to "https://nginx:8443") to "UPSTREAM_CA_FILE",
            mapOf("UPSTREAM_CA_FILE" to ca.path) to "UPSTREAM_CA_FILE",
            mapOf("CLIENT_HTTP_VERSION" to "2") to "CLIENT_HTTP_VERSION=2",
            mapOf("CLIENT_TLS_VERSION" to "1.2") to "CLIENT_TLS_VERSION",
        )) {
            val message = assertFailsWith<ConfigException>(env.toString()) { ProxyConfig.fromEnv(env) }.message!!
            assertTrue(names in message && "\n" !in message, message)
        }
    }

    @Test
    fun `the network's values are read for lab_network_info, off by default, the jitter no more than the round trip`() {
        assertEquals(UpstreamNetwork(), ProxyConfig.fromEnv(emptyMap()).network)
        assertEquals(false, ProxyConfig.fromEnv(mapOf("UPSTREAM_RTT_MS" to "0")).network.on)
        val network = ProxyConfig.fromEnv(
            mapOf("UPSTREAM_RTT_MS" to "20", "UPSTREAM_JITTER_MS" to "4", "UPSTREAM_BANDWIDTH_KBPS" to "1000"),
        ).network
        assertEquals(UpstreamNetwork(20, 4, 1000), network)
        assertTrue(network.on)
        val message = assertFailsWith<ConfigException> {
            ProxyConfig.fromEnv(mapOf("UPSTREAM_RTT_MS" to "2", "UPSTREAM_JITTER_MS" to "3"))
        }.message!!
        // Worded as toxiproxy/lab_network.py words it (the runner and compose's toxiproxy-init check it first).
        assertTrue(message.startsWith("UPSTREAM_JITTER_MS=3 is more than UPSTREAM_RTT_MS=2") && "\n" !in message, message)
    }

    @Test
    fun `pipelining is CIO's alone`() {
        assertEquals(true, ProxyConfig.fromEnv(mapOf("CLIENT_PIPELINING" to "on")).pipelining)
        val message = assertFailsWith<ConfigException> {
            ProxyConfig.fromEnv(mapOf("CLIENT_ENGINE" to "okhttp", "CLIENT_PIPELINING" to "on"))
        }.message!!
        assertTrue(message.startsWith("CLIENT_PIPELINING=on is not possible with CLIENT_ENGINE=okhttp"), message)
    }
}
