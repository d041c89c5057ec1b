/**
 * The connections in the clients' pools, in use and idle, for the engines that expose a pool:
 * OkHttp (the `ConnectionPool` the lab gives each client) and Apache5 (the connection manager Ktor
 * builds inside its engine). Summed over the live clients: a per-call client has a pool of its own,
 * tracked from its creation until it is closed. CIO, Apache (HttpClient 4) and Java expose none;
 * their setups say `pool_metrics=not exposed`.
 */
package lab.proxy.client

import io.ktor.client.HttpClient
import kotlinx.coroutines.Job
import java.util.concurrent.ConcurrentHashMap

object ClientPools {
    /** One client's pool, read when `/metrics` is scraped. */
    fun interface Pool {
        fun counts(): Counts
    }

    data class Counts(val inUse: Int, val idle: Int)

    private val live = ConcurrentHashMap.newKeySet<Pool>()

    /** Counts [pool] until [client] is closed; returns [client]. */
    fun track(client: HttpClient, pool: Pool): HttpClient {
        live.add(pool)
        val job = client.coroutineContext[Job]
        if (job == null) live.remove(pool) else job.invokeOnCompletion { live.remove(pool) }
        return client
    }

    /** In use and idle over every live client's pool. */
    fun total(): Counts = live.fold(Counts(0, 0)) { sum, pool ->
        val c = runCatching { pool.counts() }.getOrDefault(Counts(0, 0))
        Counts(sum.inUse + c.inUse, sum.idle + c.idle)
    }

    /** Pools being counted (a test's view). */
    val size: Int get() = live.size
}
