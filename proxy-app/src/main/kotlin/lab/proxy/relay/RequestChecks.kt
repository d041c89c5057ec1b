/**
 * Requests the proxy refuses before anything is sent upstream, each with the status a careful
 * reverse proxy gives and a one-line reason.
 *
 * - TRACE and CONNECT are not forwarded (405): TRACE reflects the request, credentials included,
 *   and the proxy tunnels nothing.
 * - HTTP/1.1 without `Host` is malformed (400, RFC 9112 section 3.2).
 * - A `Transfer-Encoding` whose last coding is not `chunked`, or that names it twice, cannot be
 *   framed (400, RFC 9112 sections 6.1 and 7), and one with another coding before `chunked` is not supported (501): the
 *   server codec would read such a body as the next request, so the connection is closed after the
 *   answer.
 * - `Content-Length` beside `Transfer-Encoding` (400, the connection closed: RFC 9112 section 6.1;
 *   the codec keeps both visible, [lab.proxy.server.ServerCodec]): a sign of request smuggling, never forwarded.
 * - GET and HEAD with a body (400): one engine (OkHttp) drops such a body but keeps its
 *   `Content-Length`, which desyncs the pooled upstream connection for the next caller. Refused
 *   for every engine alike.
 * - CR, LF or NUL in a header (400).
 *
 * A refused request's body is never read, so [Refusal.close] asks for the connection to close.
 */
package lab.proxy.relay

import io.ktor.http.Headers
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode

data class Refusal(val status: HttpStatusCode, val reason: String, val close: Boolean)

object RequestChecks {
    private val notForwarded = setOf("TRACE", "CONNECT")
    private val noBody = setOf(HttpMethod.Get, HttpMethod.Head)

    fun refusal(method: HttpMethod, version: String, headers: Headers): Refusal? {
        val transferEncoding = ForwardedHeaders.tokens(headers, HttpHeaders.TransferEncoding)
        val chunked = transferEncoding == listOf("chunked")
        val length = headers[HttpHeaders.ContentLength]?.trim()?.toLongOrNull()
        val hasBody = transferEncoding.isNotEmpty() || (length != null && length > 0)
        return when {
            transferEncoding.isNotEmpty() && (transferEncoding.last() != "chunked" || transferEncoding.count { it == "chunked" } > 1) -> Refusal(
                HttpStatusCode.BadRequest, "Transfer-Encoding ${transferEncoding.joinToString(", ")} does not end with chunked once", close = true,
            )
            transferEncoding.isNotEmpty() && !chunked -> Refusal(
                HttpStatusCode.NotImplemented, "Transfer-Encoding ${transferEncoding.joinToString(", ")} is not supported", close = true,
            )
            transferEncoding.isNotEmpty() && headers.contains(HttpHeaders.ContentLength) -> Refusal(
                HttpStatusCode.BadRequest, "Content-Length with Transfer-Encoding", close = true,
            )
            method.value.uppercase() in notForwarded -> Refusal(
                HttpStatusCode.MethodNotAllowed, "${method.value} is not forwarded", close = hasBody,
            )
            version == "HTTP/1.1" && headers[HttpHeaders.Host].isNullOrBlank() -> Refusal(
                HttpStatusCode.BadRequest, "HTTP/1.1 request without Host", close = hasBody,
            )
            method in noBody && hasBody -> Refusal(
                HttpStatusCode.BadRequest, "${method.value} with a body is not forwarded", close = true,
            )
            ForwardedHeaders.hasUnsafeValue(headers) -> Refusal(
                HttpStatusCode.BadRequest, "control character in a header", close = true,
            )
            else -> null
        }
    }
}
