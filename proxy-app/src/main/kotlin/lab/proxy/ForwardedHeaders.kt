/**
 * Which headers cross the proxy, in each direction (RFC 9110 section 7.6.1).
 *
 * Hop-by-hop headers, and any header a `Connection` header names, stay on their own hop.
 * Framing headers (`Content-Length`, `Content-Type`, `Transfer-Encoding`) are not copied as
 * text: the streamed body carries its length and type, and each side's engine frames it.
 * `Host` is the upstream's, so a spoofed `Host` cannot steer the request.
 */
package lab.proxy

import io.ktor.http.Headers
import io.ktor.http.HttpHeaders

object ForwardedHeaders {
    private val hopByHop = setOf(
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    )

    /** Set by the body or by the engine, never copied as text. */
    private val framing = setOf("content-length", "content-type")

    /** Request headers the proxy replaces or must not forward. */
    private val requestOnly = setOf("host", "expect", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host")

    /** True when any value holds CR, LF or NUL: such a request is rejected, not forwarded. */
    fun hasUnsafeValue(headers: Headers): Boolean =
        headers.entries().any { (name, values) ->
            name.any { it < ' ' } || values.any { v -> v.any { it == '\r' || it == '\n' || it == '\u0000' } }
        }

    fun toUpstream(headers: Headers, remoteAddress: String, scheme: String): List<Pair<String, String>> {
        val drop = dropped(headers) + requestOnly
        val out = mutableListOf<Pair<String, String>>()
        headers.forEach { name, values ->
            if (name.lowercase() !in drop) values.forEach { out += name to it }
        }
        val priorFor = headers.getAll(HttpHeaders.XForwardedFor)?.joinToString(", ")
        out += HttpHeaders.XForwardedFor to (if (priorFor.isNullOrBlank()) remoteAddress else "$priorFor, $remoteAddress")
        out += HttpHeaders.XForwardedProto to scheme
        headers[HttpHeaders.Host]?.let { out += HttpHeaders.XForwardedHost to it }
        return out
    }

    /**
     * A `Location` that points at the upstream becomes a path on the proxy (like nginx's
     * `proxy_redirect default`), so a caller never learns or follows the upstream's address.
     */
    fun toClient(headers: Headers, upstreamUrl: String): List<Pair<String, String>> {
        val drop = dropped(headers)
        val out = mutableListOf<Pair<String, String>>()
        headers.forEach { name, values ->
            if (name.lowercase() in drop) return@forEach
            values.forEach { value ->
                out += name to if (name.equals(HttpHeaders.Location, ignoreCase = true)) {
                    relativeToUpstream(value, upstreamUrl)
                } else {
                    value
                }
            }
        }
        return out
    }

    private fun relativeToUpstream(location: String, upstreamUrl: String): String {
        if (!location.startsWith(upstreamUrl, ignoreCase = true)) return location
        val rest = location.substring(upstreamUrl.length)
        return when {
            rest.isEmpty() -> "/"
            rest.startsWith("/") -> rest
            rest.startsWith("?") -> "/$rest"
            else -> location // another host that merely shares the prefix, e.g. nginx:8080
        }
    }

    private fun dropped(headers: Headers): Set<String> {
        val named = headers.getAll(HttpHeaders.Connection).orEmpty()
            .flatMap { it.split(',') }.map { it.trim().lowercase() }.filter { it.isNotEmpty() }
        val proxyStar = headers.names().map { it.lowercase() }.filter { it.startsWith("proxy-") }
        return hopByHop + framing + named + proxyStar
    }
}
