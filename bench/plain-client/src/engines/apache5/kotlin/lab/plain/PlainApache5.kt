/** Apache5's reference clients. */
package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache5.Apache5

object PlainApache5 : PlainEngine {
    override fun plain(): HttpClient = HttpClient(Apache5) { expectSuccess = false }

    override fun withLimits(n: Int): HttpClient = HttpClient(Apache5) {
        expectSuccess = false
        engine {
            configureConnectionManager {
                setMaxConnTotal(n)
                setMaxConnPerRoute(n)
            }
        }
    }
}
