/**
 * Forwards every request to the upstream through the engine under test.
 *
 * Bodies are streamed in both directions, never buffered: the request body is handed to
 * the engine as a channel, and the upstream's body is copied to the caller inside
 * `execute { }`, while the upstream response is still open. Failures before a response
 * become 502 (no connection, broken exchange) or 504 (timeout) with a short text body.
 */
package lab.proxy

import io.ktor.client.HttpClient
import io.ktor.client.request.header
import io.ktor.client.request.prepareRequest
import io.ktor.client.request.setBody
import io.ktor.client.request.url
import io.ktor.client.statement.HttpResponse
import io.ktor.client.statement.bodyAsChannel
import io.ktor.http.ContentType
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.http.content.OutgoingContent
import io.ktor.http.headersOf
import io.ktor.server.application.ApplicationCall
import io.ktor.server.request.httpMethod
import io.ktor.server.request.receiveChannel
import io.ktor.server.request.uri
import io.ktor.server.response.respondText
import io.ktor.server.response.respond
import io.ktor.server.routing.Route
import io.ktor.server.routing.route
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.ByteWriteChannel
import io.ktor.utils.io.copyTo
import kotlinx.coroutines.CancellationException

fun Route.proxyRoutes(config: ProxyConfig, clients: ClientProvider, metrics: ProxyMetrics) {
    val forwarder = Forwarder(config, clients, metrics)
    route("{...}") {
        handle { forwarder.forward(call) }
    }
}

class Forwarder(
    private val config: ProxyConfig,
    private val clients: ClientProvider,
    private val metrics: ProxyMetrics,
) {
    private val failureLog = FailureLog()

    suspend fun forward(call: ApplicationCall) {
        val target = RequestTarget.normalize(call.request.uri)
        if (target is Target.Reject) return call.respondText("Bad request: ${target.reason}\n", status = HttpStatusCode.BadRequest)
        if (ForwardedHeaders.hasUnsafeValue(call.request.headers)) {
            return call.respondText("Bad request: control character in a header\n", status = HttpStatusCode.BadRequest)
        }
        val requestContentType = call.request.headers[HttpHeaders.ContentType]?.let {
            runCatching { ContentType.parse(it) }.getOrNull()
                ?: return call.respondText("Bad request: malformed Content-Type\n", status = HttpStatusCode.BadRequest)
        }
        val url = config.upstreamUrl + (target as Target.Forward).pathAndQuery

        val started = System.nanoTime()
        var responseStarted = false
        var outcome = Outcome.FAILED
        try {
            clients.withClient { client ->
                client.prepare(call, url, requestContentType).execute { upstream ->
                    outcome = Outcome.of(upstream.status.value)
                    responseStarted = true
                    call.respond(relay(call, upstream))
                }
            }
        } catch (e: CancellationException) {
            // The caller went away (or the server is stopping): nothing left to answer.
            outcome = Outcome.ABORTED
            throw e
        } catch (e: Throwable) {
            if (responseStarted) {
                // Too late for a status: rethrow so the server drops the connection instead
                // of ending a chunked body cleanly (which would pass a truncated body as whole).
                outcome = Outcome.ABORTED
                failureLog.record("aborted", e)
                throw e
            }
            val failure = UpstreamFailure.classify(e)
            outcome = failure.outcome
            failureLog.record(failure.outcome.tag, e)
            call.respondText(
                "${failure.status.value} ${failure.status.description}: ${failure.reason} (${e::class.simpleName})\n",
                status = failure.status,
            )
        } finally {
            metrics.recordUpstream(outcome, System.nanoTime() - started)
        }
    }

    private suspend fun HttpClient.prepare(call: ApplicationCall, url: String, contentType: ContentType?) =
        prepareRequest {
            url(url)
            method = call.request.httpMethod
            ForwardedHeaders.toUpstream(call.request.headers, call.request.local.remoteAddress, call.request.local.scheme)
                .forEach { (name, value) -> header(name, value) }
            val length = call.request.headers[HttpHeaders.ContentLength]?.toLongOrNull()
            val chunked = call.request.headers[HttpHeaders.TransferEncoding]?.contains("chunked", ignoreCase = true) == true
            // An empty body is sent as one only where it means something (POST/PUT/PATCH
            // with Content-Length: 0); elsewhere it is no body, which every engine accepts
            // (Apache5 refuses an OPTIONS entity without a Content-Type).
            val hasBody = chunked || (length != null && (length > 0 || method in methodsWithBody))
            if (hasBody) {
                // Streamed: the engine pulls the caller's body as it sends it upstream.
                setBody(StreamedBody(call.receiveChannel(), if (chunked) null else length, contentType))
            }
        }

    private fun relay(call: ApplicationCall, upstream: HttpResponse): OutgoingContent {
        val status = upstream.status
        val headers = headersOf(*ForwardedHeaders.toClient(upstream.headers, config.upstreamUrl).groupBy({ it.first }, { it.second })
            .map { it.key to it.value }.toTypedArray())
        val length = upstream.headers[HttpHeaders.ContentLength]?.toLongOrNull()
        val type = upstream.headers[HttpHeaders.ContentType]?.let { runCatching { ContentType.parse(it) }.getOrNull() }
        val bodiless = call.request.httpMethod == HttpMethod.Head || status.value in 100..199 ||
            status == HttpStatusCode.NoContent || status == HttpStatusCode.NotModified
        return if (bodiless) {
            Bodiless(status, headers, length, type)
        } else {
            RelayedBody(status, headers, length, type, upstream)
        }
    }
}

private val methodsWithBody = setOf(HttpMethod.Post, HttpMethod.Put, HttpMethod.Patch)

/** The caller's request body, handed to the engine as a channel. */
private class StreamedBody(
    private val source: ByteReadChannel,
    override val contentLength: Long?,
    override val contentType: ContentType?,
) : OutgoingContent.ReadChannelContent() {
    override fun readFrom(): ByteReadChannel = source
}

/** The upstream's body, copied to the caller while the upstream response is open. */
private class RelayedBody(
    override val status: HttpStatusCode,
    override val headers: io.ktor.http.Headers,
    override val contentLength: Long?,
    override val contentType: ContentType?,
    private val upstream: HttpResponse,
) : OutgoingContent.WriteChannelContent() {
    override suspend fun writeTo(channel: ByteWriteChannel) {
        upstream.bodyAsChannel().copyTo(channel)
    }
}

/** A response without a body (HEAD, 204, 304): status, headers and the announced length. */
private class Bodiless(
    override val status: HttpStatusCode,
    override val headers: io.ktor.http.Headers,
    override val contentLength: Long?,
    override val contentType: ContentType?,
) : OutgoingContent.NoContent()
