/**
 * The proxy's own TCP sockets to the upstream, by state, read from the kernel (`/proc/self/net/tcp`
 * and `tcp6`): those whose remote port is the upstream's. `ESTABLISHED` are the connections open now;
 * `TIME_WAIT` are the ones this side closed in the last minute or so (Linux keeps them 60 s), each
 * holding a local port: the cost of a new connection per request that outlives the request. In a
 * container this is the proxy's own network namespace; natively the host's, where the proxy of an
 * earlier run, or Toxiproxy, may have closed connections to the same port within the last minute.
 * A socket in TIME_WAIT has no owner left, so those present when this proxy starts are noted and
 * left out for the 60 s they can live: the count is this proxy's own from its first second.
 */
package lab.proxy.metrics

import java.io.File
import java.net.URI

class UpstreamSockets(
    private val port: Int,
    private val files: List<File> = PROC_FILES,
    private val clock: () -> Long = System::nanoTime,
) {
    data class Counts(val established: Int, val timeWait: Int)

    @Volatile
    private var last: Pair<Long, Counts>? = null

    private val started = clock()

    /** Sockets (local and remote address) in TIME_WAIT before this proxy dialled anything. */
    @Volatile
    private var inherited: Set<String>? = buildSet { scan { key, state -> if (state == TIME_WAIT) add(key) } }

    /** The counts now; one read of the kernel's tables serves every gauge of a scrape (250 ms). */
    fun counts(): Counts {
        val now = clock()
        last?.takeIf { now - it.first < CACHE_NANOS }?.let { return it.second }
        return read().also { last = now to it }
    }

    private fun read(): Counts {
        val now = clock()
        if (now - started > INHERITED_NANOS) inherited = null // the kernel has dropped them all
        val before = inherited.orEmpty()
        var established = 0
        var timeWait = 0
        scan { key, state ->
            when {
                state == ESTABLISHED -> established++
                state == TIME_WAIT && key !in before -> timeWait++
            }
        }
        return Counts(established, timeWait)
    }

    /** Each socket to the upstream's port: its addresses ("local remote") and its state in hex. */
    private fun scan(each: (key: String, state: String) -> Unit) {
        for (file in files) {
            if (!file.canRead()) continue
            file.bufferedReader().useLines { lines ->
                lines.drop(1).forEach { line ->
                    // "  sl  local_address rem_address   st ...": addresses as HEXIP:HEXPORT, state in hex.
                    val fields = line.trim().split(WHITESPACE, limit = 5)
                    if (fields.size < 4 || fields[2].substringAfterLast(':').toIntOrNull(16) != port) return@forEach
                    each("${fields[1]} ${fields[2]}", fields[3])
                }
            }
        }
    }

    companion object {
        private val WHITESPACE = Regex("\\s+")
        private const val CACHE_NANOS = 250_000_000L
        private const val ESTABLISHED = "01"
        private const val TIME_WAIT = "06"

        // Linux keeps a socket in TIME_WAIT 60 s (TCP_TIMEWAIT_LEN); a second more for the timer.
        private const val INHERITED_NANOS = 61_000_000_000L
        val PROC_FILES = listOf(File("/proc/self/net/tcp"), File("/proc/self/net/tcp6"))

        /** The port the proxy dials for [upstreamUrl] (80 or 443 when the URL names none). */
        fun portOf(upstreamUrl: String): Int {
            val uri = URI(upstreamUrl)
            return if (uri.port != -1) uri.port else if (uri.scheme.equals("https", true)) 443 else 80
        }
    }
}
