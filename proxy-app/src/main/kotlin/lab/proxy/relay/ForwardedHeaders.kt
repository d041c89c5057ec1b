/**
 * Which headers cross the proxy, in each direction (RFC 9110 section 7.6.1).
 *
 * Hop-by-hop headers, and any header a `Connection` header names, stay on their own hop.
 * Framing headers (`Content-Length`, `Content-Type`, `Transfer-Encoding`) are not copied as
 * text: the streamed body carries its length and type, and each side's engine frames it.
 * `Host` is the upstream's, so a spoofed `Host` cannot steer the request.
 */
package lab.proxy.relay

import io.ktor.http.Headers
import io.ktor.http.HttpHeaders

object ForwardedHeaders {
    /** Hop-by-hop, and framing headers set by the body or by the engine, never copied as text. */
    private val neverCopied = setOf(
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
        "content-length", "content-type",
    )

    /** Request headers the proxy replaces or must not forward. */
    private val requestOnly = setOf("host", "expect", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host")

    fun toUpstream(headers: Headers, remoteAddress: String, scheme: String): List<Pair<String, String>> {
        val named = connectionNamed(headers)
        val out = ArrayList<Pair<String, String>>(headers.names().size + 3)
        headers.forEach { name, values ->
            val lower = name.lowercase()
            if (!dropped(lower, named) && lower !in requestOnly) values.forEach { out += name to it }
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
        val named = connectionNamed(headers)
        val out = ArrayList<Pair<String, String>>(headers.names().size)
        headers.forEach { name, values ->
            if (dropped(name.lowercase(), named)) return@forEach
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

    /** The comma-separated tokens of every [name] header, trimmed and in lower case; empty without one. */
    private fun tokens(headers: Headers, name: String): List<String> =
        headers.getAll(name)?.flatMap { it.split(',') }?.map { it.trim().lowercase() }?.filter { it.isNotEmpty() }.orEmpty()

    /** The header names a `Connection` header lists (lower case). */
    private fun connectionNamed(headers: Headers): Set<String> = tokens(headers, HttpHeaders.Connection).toSet()

    /** [lower] (a lower-case name) stays on its hop: hop-by-hop, framing, `Proxy-*`, or named by `Connection`. */
    private fun dropped(lower: String, named: Set<String>): Boolean =
        lower in neverCopied || lower.startsWith("proxy-") || lower in named
}
