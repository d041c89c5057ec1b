/**
 * Maps an engine's exception to the gateway answer: 504 for a timeout, 502 for the rest.
 *
 * Each engine throws its own types (and some wrap them), so the whole cause chain is read.
 * [FailureLog] keeps a failing upstream from writing a stack trace per request.
 */
package lab.proxy.relay

import io.ktor.client.network.sockets.ConnectTimeoutException
import io.ktor.client.plugins.HttpRequestTimeoutException
import io.ktor.http.HttpStatusCode
import lab.proxy.metrics.Outcome
import org.slf4j.LoggerFactory
import java.io.InterruptedIOException
import java.net.ConnectException
import java.net.NoRouteToHostException
import java.net.UnknownHostException
import java.nio.channels.UnresolvedAddressException
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.TimeoutException

data class UpstreamFailure(val status: HttpStatusCode, val outcome: Outcome, val reason: String) {
    companion object {
        /** The proxy's own request timeout ([Watchdog]) ended the exchange before the answer. */
        val TIMED_OUT = UpstreamFailure(HttpStatusCode.GatewayTimeout, Outcome.TIMEOUT, "upstream did not answer in time")

        fun classify(error: Throwable): UpstreamFailure {
            val chain = generateSequence(error) { it.cause.takeIf { c -> c !== it } }.take(16).toList()
            return when {
                chain.any { it.isTimeout() } ->
                    UpstreamFailure(HttpStatusCode.GatewayTimeout, Outcome.TIMEOUT, "upstream did not answer in time")

                chain.any { it.isUnreachable() } ->
                    UpstreamFailure(HttpStatusCode.BadGateway, Outcome.UNREACHABLE, "upstream unreachable")

                else -> UpstreamFailure(HttpStatusCode.BadGateway, Outcome.FAILED, "upstream exchange failed")
            }
        }

        private fun Throwable.isTimeout(): Boolean =
            this is HttpRequestTimeoutException || this is ConnectTimeoutException ||
                this is io.ktor.client.network.sockets.SocketTimeoutException ||
                this is java.net.SocketTimeoutException || this is java.net.http.HttpTimeoutException ||
                this is TimeoutException ||
                // OkHttp signals its timeouts as a bare InterruptedIOException("timeout").
                (this is InterruptedIOException && message?.contains("timeout", ignoreCase = true) == true)

        private fun Throwable.isUnreachable(): Boolean =
            this is ConnectException || this is NoRouteToHostException || this is UnknownHostException ||
                this is UnresolvedAddressException
    }
}

/** Logs each kind of failure at most once per [intervalMs], with a count of those it skipped. */
class FailureLog(private val intervalMs: Long = 10_000) {
    private val log = LoggerFactory.getLogger("lab.proxy.upstream")
    private val last = ConcurrentHashMap<String, Long>()
    private val skipped = ConcurrentHashMap<String, Long>()

    fun record(kind: String, error: Throwable) {
        val now = System.currentTimeMillis()
        val previous = last[kind]
        if (previous != null && now - previous < intervalMs) {
            skipped.merge(kind, 1, Long::plus)
            return
        }
        last[kind] = now
        val more = skipped.remove(kind)?.let { " ($it more since the last line)" } ?: ""
        log.warn("upstream {}: {}: {}{}", kind, error::class.qualifiedName, error.message, more)
        log.debug("upstream {} detail", kind, error)
    }
}
