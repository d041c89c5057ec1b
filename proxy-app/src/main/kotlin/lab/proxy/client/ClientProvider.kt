/**
 * The client's lifetime: one `HttpClient` for the process, or a new one for every call.
 *
 * Both count the clients they create and close, so a dashboard (and a test) can see that
 * per-call clients are always closed, also when the call fails or the caller goes away.
 */
package lab.proxy.client

import io.ktor.client.HttpClient
import lab.proxy.config.Lifetime
import java.io.Closeable
import java.util.concurrent.atomic.AtomicLong

/** Counts of clients created and closed; read by the metrics, written by the providers. */
class ClientCounters {
    val created = AtomicLong()
    val closed = AtomicLong()
}

sealed class ClientProvider(protected val counters: ClientCounters) : Closeable {
    /** Runs [block] with a client; a per-call client is closed when [block] ends, however it ends. */
    abstract suspend fun <T> withClient(block: suspend (HttpClient) -> T): T

    class Singleton(private val factory: () -> HttpClient, counters: ClientCounters) : ClientProvider(counters) {
        // Made at start-up, so the first request does not pay for it.
        private val client: HttpClient = factory().also { counters.created.incrementAndGet() }

        override suspend fun <T> withClient(block: suspend (HttpClient) -> T): T = block(client)

        override fun close() {
            client.close()
            counters.closed.incrementAndGet()
        }
    }

    class PerCall(private val factory: () -> HttpClient, counters: ClientCounters) : ClientProvider(counters) {
        override suspend fun <T> withClient(block: suspend (HttpClient) -> T): T {
            val client = factory()
            counters.created.incrementAndGet()
            try {
                return block(client)
            } finally {
                client.close()
                counters.closed.incrementAndGet()
            }
        }

        override fun close() = Unit
    }

    companion object {
        fun create(lifetime: Lifetime, counters: ClientCounters, factory: () -> HttpClient): ClientProvider =
            when (lifetime) {
                Lifetime.SINGLETON -> Singleton(factory, counters)
                Lifetime.PER_CALL -> PerCall(factory, counters)
            }
    }
}
