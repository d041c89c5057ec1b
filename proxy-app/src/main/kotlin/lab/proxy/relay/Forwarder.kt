/**
 * Forwards one request to the upstream through the engine under test, and its answer back.
 *
 * Bodies stream in both directions and are checked on the way: a body shorter than its
 * `Content-Length`, a caller's body cut off, or an engine's error in the middle of a body never
 * ends cleanly on the other side (see [RelayedBodies]). Before the answer starts, failures
 * become 502 (no connection, broken exchange, body short of its length) or 504 (timeout),
 * with a short text body; a caller's body whose framing is invalid is a 400, and the connection
 * closes. Requests the proxy refuses never get here: the server's guards answer them
 * ([lab.proxy.server.RequestChecks]). After the answer started, the connection is dropped: a truncated body is never passed
 * off as complete.
 */
package lab.proxy.relay

import io.ktor.client.HttpClient
import io.ktor.client.request.header
import io.ktor.client.request.prepareRequest
import io.ktor.client.request.setBody
import io.ktor.client.request.url
import io.ktor.http.ContentType
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.server.application.ApplicationCall
import io.ktor.server.request.httpMethod
import io.ktor.server.request.httpVersion
import io.ktor.server.request.uri
import io.ktor.server.response.header
import io.ktor.server.response.respond
import io.ktor.server.response.respondText
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.job
import lab.proxy.client.ClientProvider
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.Outcome
import lab.proxy.metrics.ProxyMetrics
import lab.proxy.server.RequestTarget
import lab.proxy.server.ServerGuards
import lab.proxy.server.Target

class Forwarder(
    private val config: ProxyConfig,
    private val clients: ClientProvider,
    private val metrics: ProxyMetrics,
    private val own: OwnEndpoints,
) {
    private val failureLog = FailureLog()

    suspend fun forward(call: ApplicationCall) {
        val request = call.request
        // The server's guards refused every request RequestChecks names before it got here; a target
        // is resolved here for the path it sends (rejected still where no guard runs: a test engine).
        val pathAndQuery = when (val target = RequestTarget.normalize(request.uri)) {
            is Target.Forward -> target.pathAndQuery
            is Target.Reject -> return refuse(call, HttpStatusCode.BadRequest, target.reason)
        }
        if (request.httpMethod == HttpMethod.Get && own.serves(pathAndQuery)) return own.respond(call, pathAndQuery)
        val contentType = request.headers[HttpHeaders.ContentType]?.let { runCatching { ContentType.parse(it) }.getOrNull() }

        val started = System.nanoTime()
        var answered = false
        var outcome = Outcome.FAILED
        var protocol = ProxyMetrics.NONE
        var watch: Watchdog.Watch? = null
        try {
            // A scope of its own: the watchdog cancels the exchange, not the call, which can still
            // answer 504 (as withTimeout does, without its cost per request).
            coroutineScope {
                val w = Watchdog.watch(config.requestTimeoutMs, coroutineContext.job).also { watch = it }
                try {
                    clients.withClient { client ->
                        client.prepare(call, config.upstreamUrl + pathAndQuery, contentType, w).execute { upstream ->
                            w.progress()
                            outcome = Outcome.of(upstream.status.value)
                            protocol = upstream.version.toString()
                            metrics.noteAnswer(protocol)
                            // Reads the body's first bytes (a small body whole) before answering: a
                            // stall or a short body here is still a 504 or a 502, not an empty reply.
                            val answer = RelayedBodies.answer(call, upstream, config.upstreamUrl, w)
                            answered = true
                            call.respond(answer)
                            // A streamed body that broke has aborted the caller's connection and says why.
                            (answer as? RelayedBodies.Streamed)?.failure?.let { throw it }
                        }
                    }
                } finally {
                    w.stop()
                }
            }
        } catch (e: Throwable) {
            val broken = ServerGuards.framingBroken(call)
            if (broken != null && !answered) {
                // The caller's framing broke, not the upstream: 400 (whatever the engine made of the
                // failed read), and the connection closes; the decoder reads nothing after it.
                outcome = Outcome.ABORTED
                failureLog.record("aborted", e)
                return refuse(call, HttpStatusCode.BadRequest, "invalid body framing: $broken")
            }
            val timedOut = watch?.expired == true
            if (e is CancellationException && !timedOut) {
                // The caller went away (or the server is stopping): nothing left to answer.
                outcome = Outcome.ABORTED
                throw e
            }
            if (answered || ServerGuards.bodyCut(call)) {
                // Too late for a status, or no one to give it to: the connection is dropped, so a
                // chunked body never ends cleanly.
                outcome = Outcome.ABORTED
                failureLog.record("aborted", e)
                ServerGuards.abort(call)
                if (e is CancellationException) return
                throw e
            }
            val failure = if (timedOut) UpstreamFailure.TIMED_OUT else UpstreamFailure.classify(e)
            outcome = failure.outcome
            failureLog.record(failure.outcome.tag, e)
            call.respondText(
                "${failure.status.value} ${failure.status.description}: ${failure.reason} (${e::class.simpleName})\n",
                status = failure.status,
            )
        } finally {
            metrics.recordUpstream(outcome, protocol, System.nanoTime() - started)
        }
    }

    /** A 4xx that closes the connection: ServerGuards closes it after any response that says so. */
    private suspend fun refuse(call: ApplicationCall, status: HttpStatusCode, reason: String) {
        call.response.header(HttpHeaders.Connection, "close")
        call.respondText("${status.value} ${status.description}: $reason\n", status = status)
    }

    private suspend fun HttpClient.prepare(call: ApplicationCall, url: String, contentType: ContentType?, watch: Watchdog.Watch) =
        prepareRequest {
            url(url)
            method = call.request.httpMethod
            ForwardedHeaders.toUpstream(call.request.headers, call.request.local.remoteAddress, call.request.local.scheme)
                .forEach { (name, value) -> header(name, value) }
            val length = call.request.headers[HttpHeaders.ContentLength]?.toLongOrNull()
            val chunked = call.request.headers.contains(HttpHeaders.TransferEncoding)
            // An empty body is sent as one only where it means something (POST/PUT/PATCH
            // with Content-Length: 0); elsewhere it is no body, which every engine accepts
            // (Apache5 refuses an OPTIONS entity without a Content-Type).
            if (chunked || (length != null && (length > 0 || method in methodsWithBody))) {
                setBody(RelayedBodies.CallerBody(call, if (chunked) null else length, contentType, watch))
            }
        }

    private companion object {
        val methodsWithBody = setOf(HttpMethod.Post, HttpMethod.Put, HttpMethod.Patch)
    }
}
