/**
 * The clients the lab's own is measured against: the plainest Ktor code a user writes for each
 * engine, in two forms, written here without any code of the lab's (this module does not depend
 * on the proxy), so that a cost of the lab's setup cannot hide in its own reference.
 *
 * - [plain]: `HttpClient(Engine) { expectSuccess = false }`: the engine's defaults, whatever they
 *   are (OkHttp: 5 requests per host; CIO: 100 connections per route; Java: HTTP/2 first).
 * - [withLimits]: the same, with only the connection limit the lab applies to every engine
 *   (`CLIENT_MAX_CONNECTIONS`) set on the engine's own knob, as its documentation shows. The JDK's
 *   client has none: it is [plain] there.
 */
package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache5.Apache5
import io.ktor.client.engine.cio.CIO
import io.ktor.client.engine.cio.endpoint
import io.ktor.client.engine.java.Java
import io.ktor.client.engine.okhttp.OkHttp
import okhttp3.Dispatcher

/** How a reference client is built: [plain] or [withLimits]. */
enum class PlainForm(val id: String) {
    DEFAULTS("plain"),
    LIMITS("plain-limits"),
    ;

    companion object {
        fun of(id: String): PlainForm? = entries.firstOrNull { it.id == id }
    }
}

object PlainClients {
    /** The engines a reference can be built for in this build (the apache one only where the release has it). */
    val engines: List<String> get() = listOf("cio", "apache", "apache5", "okhttp", "java").filter { it != "apache" || apache != null }

    fun create(engine: String, form: PlainForm, maxConnections: Int): HttpClient = when (form) {
        PlainForm.DEFAULTS -> plain(engine)
        PlainForm.LIMITS -> withLimits(engine, maxConnections)
    }

    fun plain(engine: String): HttpClient = when (engine) {
        "cio" -> HttpClient(CIO) { expectSuccess = false }
        "apache" -> apacheOrFail().plain()
        "apache5" -> HttpClient(Apache5) { expectSuccess = false }
        "okhttp" -> HttpClient(OkHttp) { expectSuccess = false }
        "java" -> HttpClient(Java) { expectSuccess = false }
        else -> throw IllegalArgumentException("no engine '$engine'; one of ${engines.joinToString(", ")}")
    }

    fun withLimits(engine: String, n: Int): HttpClient = when (engine) {
        "cio" -> HttpClient(CIO) {
            expectSuccess = false
            engine {
                maxConnectionsCount = n
                endpoint { maxConnectionsPerRoute = n }
            }
        }
        "apache" -> apacheOrFail().withLimits(n)
        "apache5" -> HttpClient(Apache5) {
            expectSuccess = false
            engine {
                configureConnectionManager {
                    setMaxConnTotal(n)
                    setMaxConnPerRoute(n)
                }
            }
        }
        "okhttp" -> HttpClient(OkHttp) {
            expectSuccess = false
            engine {
                config {
                    dispatcher(Dispatcher().apply {
                        maxRequests = n
                        maxRequestsPerHost = n
                    })
                }
            }
        }
        "java" -> plain(engine) // the JDK's client cannot limit connections
        else -> throw IllegalArgumentException("no engine '$engine'; one of ${engines.joinToString(", ")}")
    }

    /** Built only for releases that publish the apache engine (src/apache). */
    interface ApacheClients {
        fun plain(): HttpClient
        fun withLimits(n: Int): HttpClient
    }

    private val apache: ApacheClients? by lazy {
        runCatching { Class.forName("lab.plain.PlainApache").getField("INSTANCE").get(null) as ApacheClients }.getOrNull()
    }

    private fun apacheOrFail(): ApacheClients =
        apache ?: throw IllegalArgumentException("this build's Ktor release has no apache engine")
}
