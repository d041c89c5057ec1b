package lab.proxy.relay

import io.ktor.client.network.sockets.ConnectTimeoutException
import io.ktor.http.HttpStatusCode
import lab.proxy.metrics.Outcome
import java.io.IOException
import java.io.InterruptedIOException
import java.net.ConnectException
import java.net.UnknownHostException
import kotlin.test.Test
import kotlin.test.assertEquals

class UpstreamFailureTest {
    private fun classify(e: Throwable) = UpstreamFailure.classify(e).let { it.status to it.outcome }

    @Test
    fun `timeouts are 504, however an engine wraps them`() {
        val timeout = HttpStatusCode.GatewayTimeout to Outcome.TIMEOUT
        assertEquals(timeout, classify(ConnectTimeoutException("connect timeout")))
        assertEquals(timeout, classify(java.net.SocketTimeoutException("read timed out")))
        assertEquals(timeout, classify(java.net.http.HttpTimeoutException("request timed out")))
        assertEquals(timeout, classify(InterruptedIOException("timeout")))
        assertEquals(timeout, classify(IOException("wrapped", java.util.concurrent.TimeoutException())))
    }

    @Test
    fun `no connection is 502 unreachable`() {
        val unreachable = HttpStatusCode.BadGateway to Outcome.UNREACHABLE
        assertEquals(unreachable, classify(ConnectException("Connection refused")))
        assertEquals(unreachable, classify(IOException("okhttp", ConnectException("Failed to connect"))))
        assertEquals(unreachable, classify(UnknownHostException("nginx")))
    }

    @Test
    fun `anything else is 502 failed`() {
        assertEquals(HttpStatusCode.BadGateway to Outcome.FAILED, classify(IOException("Connection reset by peer")))
        assertEquals(HttpStatusCode.BadGateway to Outcome.FAILED, classify(IllegalStateException("odd")))
    }

    @Test
    fun `a cause chain that loops back does not hang`() {
        val a = IOException("a")
        val b = IOException("b", a)
        a.initCause(b)
        assertEquals(Outcome.FAILED, UpstreamFailure.classify(a).outcome)
    }
}
