/** CIO's reference clients. */
package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.cio.CIO
import io.ktor.client.engine.cio.endpoint

object PlainCio : PlainEngine {
    override fun plain(): HttpClient = HttpClient(CIO) { expectSuccess = false }

    override fun withLimits(n: Int): HttpClient = limited(n, pipelining = false)

    // Without pipelining CIO opens a connection for every request (Endpoint.makeDedicatedRequest).
    override fun pipelined(n: Int): HttpClient = limited(n, pipelining = true)

    private fun limited(n: Int, pipelining: Boolean) = HttpClient(CIO) {
        expectSuccess = false
        engine {
            maxConnectionsCount = n
            endpoint { maxConnectionsPerRoute = n }
            this.pipelining = pipelining
        }
    }
}
