package lab.proxy.relay

import io.ktor.utils.io.ByteChannel
import io.ktor.utils.io.ByteReadChannel
import io.ktor.utils.io.writeFully
import kotlinx.coroutines.runBlocking

/**
 * A body as an engine or a caller's connection hands it over: the first half already there, the
 * second half from another thread, then the end (clean, or with [cause], as a reset is).
 */
fun twoPartSource(bytes: ByteArray, cause: Throwable? = null): ByteReadChannel = ByteChannel().also { ch ->
    runBlocking {
        ch.writeFully(bytes, 0, bytes.size / 2)
        ch.flush()
    }
    kotlin.concurrent.thread {
        runBlocking {
            ch.writeFully(bytes, bytes.size / 2, bytes.size)
            ch.flush()
            if (cause == null) ch.flushAndClose() else ch.cancel(cause)
        }
    }
}
