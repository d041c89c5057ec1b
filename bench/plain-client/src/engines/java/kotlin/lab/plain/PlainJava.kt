/** The JDK client's reference clients: it cannot limit connections, so both are the plain one. */
package lab.plain

import io.ktor.client.HttpClient
import io.ktor.client.engine.java.Java

object PlainJava : PlainEngine {
    override fun plain(): HttpClient = HttpClient(Java) { expectSuccess = false }

    override fun withLimits(n: Int): HttpClient = plain()
}
