/** The apache engine's reference clients (HttpClient 4; Ktor publishes it up to 3.4.1). */
@file:Suppress("DEPRECATION") // ktor-client-apache is deprecated in favour of apache5, and under test

package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.apache.Apache

object PlainApache : PlainEngine {
    override fun plain(): HttpClient = HttpClient(Apache) { expectSuccess = false }

    override fun withLimits(n: Int): HttpClient = HttpClient(Apache) {
        expectSuccess = false
        engine {
            customizeClient {
                setMaxConnTotal(n)
                setMaxConnPerRoute(n)
            }
        }
    }
}
