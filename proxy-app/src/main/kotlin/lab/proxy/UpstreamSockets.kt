/**
 * The proxy's own TCP sockets to the upstream, by state, read from the kernel (`/proc/self/net/tcp`
 * and `tcp6`): those whose remote port is the upstream's. `ESTABLISHED` are the connections open now;
 * `TIME_WAIT` are the ones this side closed in the last minute or so (Linux keeps them 60 s), each
 * holding a local port: the cost of a new connection per request that outlives the request. In a
 * container this is the proxy's own network namespace; natively the host's, where only the proxy
 * dials the upstream's (or Toxiproxy's) port.
 */
package lab.proxy

import java.io.File
import java.net.URI

class UpstreamSockets(private val port: Int, private val files: List<File> = PROC_FILES) {
    data class Counts(val established: Int, val timeWait: Int)

    @Volatile
    private var last: Pair<Long, Counts>? = null

    /** The counts now; one read of the kernel's tables serves every gauge of a scrape (250 ms). */
    fun counts(): Counts {
        val now = System.nanoTime()
        last?.takeIf { now - it.first < CACHE_NANOS }?.let { return it.second }
        return read().also { last = now to it }
    }

    private fun read(): Counts {
        var established = 0
        var timeWait = 0
        for (file in files) {
            if (!file.canRead()) continue
            file.bufferedReader().useLines { lines ->
                lines.drop(1).forEach { line ->
                    // "  sl  local_address rem_address   st ...": addresses as HEXIP:HEXPORT, state in hex.
                    val fields = line.trim().split(WHITESPACE, limit = 5)
                    if (fields.size < 4 || fields[2].substringAfterLast(':').toIntOrNull(16) != port) return@forEach
                    when (fields[3]) {
                        "01" -> established++
                        "06" -> timeWait++
                    }
                }
            }
        }
        return Counts(established, timeWait)
    }

    companion object {
        private val WHITESPACE = Regex("\\s+")
        private const val CACHE_NANOS = 250_000_000L
        val PROC_FILES = listOf(File("/proc/self/net/tcp"), File("/proc/self/net/tcp6"))

        /** The port the proxy dials for [upstreamUrl] (80 or 443 when the URL names none). */
        fun portOf(upstreamUrl: String): Int {
            val uri = URI(upstreamUrl)
            return if (uri.port != -1) uri.port else if (uri.scheme.equals("https", true)) 443 else 80
        }
    }
}
