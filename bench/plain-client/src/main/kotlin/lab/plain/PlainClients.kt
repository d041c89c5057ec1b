/**
 * The clients the lab's own is measured against: the plainest Ktor code a user writes for each
 * engine, in two forms, written here without any code of the lab's (this module does not depend
 * on the proxy), so that a cost of the lab's setup cannot hide in its own reference.
 *
 * - [PlainEngine.plain]: `HttpClient(Engine) { expectSuccess = false }`: the engine's defaults,
 *   whatever they are (OkHttp: 5 requests per host; CIO: 100 connections per route; Java: HTTP/2 first).
 * - [PlainEngine.withLimits]: the same, with only the connection limit the lab applies to every
 *   engine (`CLIENT_MAX_CONNECTIONS`) set on the engine's own knob, as its documentation shows.
 *   The JDK's client has none: it is the plain one there.
 *
 * Each engine's two clients live in its own source root (`src/engines/<engine>/kotlin`), compiled
 * only for a Ktor release that publishes the engine (pom.xml), and are found here by name.
 */
package lab.plain

import io.ktor.client.HttpClient

/** How a reference client is built: plain or with the lab's limits. */
enum class PlainForm(val id: String) {
    DEFAULTS("plain"),
    LIMITS("plain-limits"),
    ;

    companion object {
        fun of(id: String): PlainForm? = entries.firstOrNull { it.id == id }
    }
}

/** One engine's two reference clients. */
interface PlainEngine {
    fun plain(): HttpClient

    fun withLimits(n: Int): HttpClient

    /** [withLimits] with HTTP pipelining on: an engine's own knob, CIO's only; null for the others. */
    fun pipelined(n: Int): HttpClient? = null
}

object PlainClients {
    /** Every engine, by the name of its object in src/engines/<engine>/kotlin. */
    private val objects = linkedMapOf(
        "cio" to "PlainCio",
        "apache" to "PlainApache",
        "apache5" to "PlainApache5",
        "okhttp" to "PlainOkHttp",
        "java" to "PlainJava",
    )

    private val built: Map<String, PlainEngine> by lazy {
        objects.mapNotNull { (engine, name) ->
            runCatching { Class.forName("lab.plain.$name").getField("INSTANCE").get(null) as PlainEngine }
                .getOrNull()?.let { engine to it }
        }.toMap()
    }

    /** The engines a reference can be built for in this build (those its Ktor release publishes). */
    val engines: List<String> get() = built.keys.toList()

    fun create(engine: String, form: PlainForm, maxConnections: Int): HttpClient = when (form) {
        PlainForm.DEFAULTS -> plain(engine)
        PlainForm.LIMITS -> withLimits(engine, maxConnections)
    }

    fun plain(engine: String): HttpClient = of(engine).plain()

    fun withLimits(engine: String, n: Int): HttpClient = of(engine).withLimits(n)

    /** The client with the lab's limit and pipelining on; IllegalArgumentException for an engine without it. */
    fun pipelined(engine: String, n: Int): HttpClient =
        of(engine).pipelined(n) ?: throw IllegalArgumentException("pipelining is CIO's setting only, not $engine's")

    private fun of(engine: String): PlainEngine = built[engine] ?: throw IllegalArgumentException(
        if (engine in objects) "this build's Ktor release has no $engine engine; engines here: ${engines.joinToString(", ")}"
        else "no engine '$engine'; one of ${engines.joinToString(", ")}",
    )
}
