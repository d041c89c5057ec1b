/**
 * The requests the proxy refuses, judged on each request's head as Netty's decoder read it, before
 * Ktor or any engine sees it. [ServerGuards] answers a refusal itself once the answers before it on
 * the connection are written, closes the connection after it, and reads nothing after it: a request
 * the proxy cannot trust may hide the next one (request smuggling), so none of either reaches the
 * upstream. One status each, as RFC 9110 and 9112 name it:
 *
 * - the decoder could not read it: a request line longer than the server parses (414, RFC 9112
 *   section 3), a header section too large (431), anything else (400);
 * - an HTTP version other than 1.x (505), or 1.0 and 1.1 written otherwise (`http/1.1`: the name
 *   is case-sensitive, section 2.3; 400);
 * - framing (section 6): more than one `Content-Length` field or value, also on HTTP/1.0, where
 *   Netty frames by the first; one that is not digits; `Transfer-Encoding` on HTTP/1.0, beside
 *   `Content-Length`, empty, or not ending in `chunked` once (400); another coding before `chunked`
 *   (501);
 * - TRACE and CONNECT, in any case (405): TRACE reflects the request, credentials included, and the
 *   proxy tunnels nothing;
 * - `Host` (section 3.2): missing on HTTP/1.1, more than one, or not `host[:port]` (400). A comma is
 *   refused too: the value goes on as `X-Forwarded-Host`, a list;
 * - GET and HEAD with a body (400): OkHttp drops such a body but keeps its `Content-Length`, which
 *   desyncs the pooled upstream connection for the next caller;
 * - CR, LF or NUL in a header, a target [RequestTarget] rejects, a malformed `Content-Type` (400).
 */
package lab.proxy.server

import io.ktor.http.ContentType
import io.netty.handler.codec.http.HttpHeaderNames
import io.netty.handler.codec.http.HttpHeaders
import io.netty.handler.codec.http.HttpMethod
import io.netty.handler.codec.http.HttpRequest
import io.netty.handler.codec.http.HttpResponseStatus
import io.netty.handler.codec.http.HttpVersion
import io.netty.handler.codec.http.TooLongHttpHeaderException
import io.netty.handler.codec.http.TooLongHttpLineException

/** A request refused before it is forwarded: the status and a one-line reason for the caller. */
data class Refusal(val status: HttpResponseStatus, val reason: String)

object RequestChecks {
    /** Every status a refusal can carry (the metrics count each). */
    val STATUSES = listOf(
        HttpResponseStatus.BAD_REQUEST, HttpResponseStatus.METHOD_NOT_ALLOWED, HttpResponseStatus.REQUEST_URI_TOO_LONG,
        HttpResponseStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, HttpResponseStatus.NOT_IMPLEMENTED,
        HttpResponseStatus.HTTP_VERSION_NOT_SUPPORTED,
    )

    private val notForwarded = setOf("TRACE", "CONNECT")

    /** RFC 9112 section 3.2's `uri-host [":" port]` (RFC 3986's IP-literal, IPv4 or reg-name), no comma. */
    private val hostValue = Regex("""^(?:\[[0-9A-Za-z:.\-_~!$&'()*+;=]+]|(?:[A-Za-z0-9\-._~!$&'()*+;=]|%[0-9A-Fa-f]{2})+)(?::[0-9]*)?$""")

    fun refusal(request: HttpRequest): Refusal? {
        request.decoderResult().cause()?.let { return undecodable(it) }
        val headers = request.headers()
        return version(request.protocolVersion())
            ?: framing(request.protocolVersion(), headers)
            ?: when {
                request.method().name().uppercase() in notForwarded ->
                    Refusal(HttpResponseStatus.METHOD_NOT_ALLOWED, "${request.method().name()} is not forwarded")
                else -> null
            }
            ?: host(request.protocolVersion(), headers)
            ?: when {
                (request.method() == HttpMethod.GET || request.method() == HttpMethod.HEAD) && hasBody(headers) ->
                    Refusal(HttpResponseStatus.BAD_REQUEST, "${request.method().name()} with a body is not forwarded")
                hasUnsafeValue(headers) -> Refusal(HttpResponseStatus.BAD_REQUEST, "control character in a header")
                else -> null
            }
            ?: (RequestTarget.normalize(request.uri()) as? Target.Reject)?.let { Refusal(HttpResponseStatus.BAD_REQUEST, it.reason) }
            ?: contentType(headers)
    }

    /** The comma-separated tokens of every [name] field, trimmed and in lower case, empty ones left out. */
    fun tokens(headers: HttpHeaders, name: CharSequence): List<String> =
        headers.getAll(name).flatMap { it.split(',') }.map { it.trim().lowercase() }.filter { it.isNotEmpty() }

    private fun undecodable(cause: Throwable): Refusal = when (cause) {
        is TooLongHttpLineException -> Refusal(HttpResponseStatus.REQUEST_URI_TOO_LONG, "the request line is too long")
        is TooLongHttpHeaderException -> Refusal(HttpResponseStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "the header section is too large")
        else -> Refusal(HttpResponseStatus.BAD_REQUEST, (cause.message ?: cause.javaClass.simpleName).lineSequence().first().take(200))
    }

    /** Netty returns its constants for exactly `HTTP/1.1` and `HTTP/1.0`, a new version (upper-cased) otherwise. */
    private fun version(version: HttpVersion): Refusal? = when {
        version === HttpVersion.HTTP_1_1 || version === HttpVersion.HTTP_1_0 -> null
        version.protocolName() != "HTTP" || version.majorVersion() != 1 ->
            Refusal(HttpResponseStatus.HTTP_VERSION_NOT_SUPPORTED, "${version.text()} is not served here")
        version.minorVersion() <= 1 -> Refusal(HttpResponseStatus.BAD_REQUEST, "the HTTP version is not written HTTP/1.${version.minorVersion()}")
        else -> null // HTTP/1.2 and later minor versions are read as 1.1 (RFC 9110 section 2.5)
    }

    private fun framing(version: HttpVersion, headers: HttpHeaders): Refusal? {
        val lengths = ServerCodec.contentLengths(headers) ?: headers.getAll(HttpHeaderNames.CONTENT_LENGTH)
        if (lengths.size > 1 || lengths.any { ',' in it }) {
            return Refusal(HttpResponseStatus.BAD_REQUEST, "more than one Content-Length")
        }
        if (lengths.any { v -> v.trim().let { it.isEmpty() || !it.all(Char::isDigit) } }) {
            return Refusal(HttpResponseStatus.BAD_REQUEST, "Content-Length is not a number")
        }
        if (!headers.contains(HttpHeaderNames.TRANSFER_ENCODING)) return null
        val codings = tokens(headers, HttpHeaderNames.TRANSFER_ENCODING)
        val named = codings.joinToString(", ").ifEmpty { "(empty)" }
        return when {
            version.minorVersion() == 0 -> Refusal(HttpResponseStatus.BAD_REQUEST, "Transfer-Encoding in an HTTP/1.0 request")
            codings.lastOrNull() != "chunked" || codings.count { it == "chunked" } > 1 ->
                Refusal(HttpResponseStatus.BAD_REQUEST, "Transfer-Encoding $named does not end with chunked once")
            codings.size > 1 -> Refusal(HttpResponseStatus.NOT_IMPLEMENTED, "Transfer-Encoding $named is not supported")
            lengths.isNotEmpty() -> Refusal(HttpResponseStatus.BAD_REQUEST, "Content-Length with Transfer-Encoding")
            else -> null
        }
    }

    private fun host(version: HttpVersion, headers: HttpHeaders): Refusal? {
        val hosts = headers.getAll(HttpHeaderNames.HOST)
        return when {
            hosts.size > 1 -> Refusal(HttpResponseStatus.BAD_REQUEST, "more than one Host")
            hosts.isEmpty() || hosts[0].isBlank() ->
                if (version.minorVersion() == 0) null else Refusal(HttpResponseStatus.BAD_REQUEST, "HTTP/1.1 request without Host")
            !hostValue.matches(hosts[0].trim()) -> Refusal(HttpResponseStatus.BAD_REQUEST, "Host is not host[:port]")
            else -> null
        }
    }

    private fun hasBody(headers: HttpHeaders): Boolean =
        headers.contains(HttpHeaderNames.TRANSFER_ENCODING) ||
            (headers.get(HttpHeaderNames.CONTENT_LENGTH)?.trim()?.toLongOrNull() ?: 0) > 0

    /** CR, LF or NUL in a value, or a control character in a name. */
    private fun hasUnsafeValue(headers: HttpHeaders): Boolean = headers.iteratorCharSequence().asSequence().any { (name, value) ->
        name.any { it < ' ' } || value.any { it == '\r' || it == '\n' || it == '\u0000' }
    }

    private fun contentType(headers: HttpHeaders): Refusal? {
        val value = headers.get(HttpHeaderNames.CONTENT_TYPE) ?: return null
        return if (runCatching { ContentType.parse(value) }.isSuccess) null else Refusal(HttpResponseStatus.BAD_REQUEST, "malformed Content-Type")
    }
}
