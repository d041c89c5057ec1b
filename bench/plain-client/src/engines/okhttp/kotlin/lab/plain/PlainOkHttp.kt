/** OkHttp's reference clients. */
package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.okhttp.OkHttp
import okhttp3.Dispatcher

object PlainOkHttp : PlainEngine {
    override fun plain(): HttpClient = HttpClient(OkHttp) { expectSuccess = false }

    override fun withLimits(n: Int): HttpClient = HttpClient(OkHttp) {
        expectSuccess = false
        engine {
            config {
                dispatcher(Dispatcher().apply {
                    maxRequests = n
                    maxRequestsPerHost = n
                })
            }
        }
    }
}
