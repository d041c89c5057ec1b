/**
 * The Ktor side of the I/O benchmarks, as blocking calls the Java @Benchmark methods can make.
 *
 * Each call does what an application would: a socket from `aSocket(...).tcp().connect()` and
 * its write channel, or `File.readChannel()`, read or written in [chunk]-byte pieces. The
 * `runBlocking` around one 128 MiB operation costs microseconds, next to the hundreds of
 * milliseconds the operation takes.
 */
package lab.iobench

import io.ktor.network.selector.SelectorManager
import io.ktor.network.sockets.aSocket
import io.ktor.network.sockets.openReadChannel
import io.ktor.network.sockets.openWriteChannel
import io.ktor.util.cio.readChannel
import io.ktor.utils.io.readAvailable
import io.ktor.utils.io.readByte
import io.ktor.utils.io.writeFully
import io.ktor.utils.io.writeLong
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import java.io.File

object KtorIo {
    @JvmStatic
    fun selector(): SelectorManager = SelectorManager(Dispatchers.IO)

    /** Sends [total] bytes to [Sink] on [port] and waits for its acknowledgement. */
    @JvmStatic
    fun writeSocket(selector: SelectorManager, port: Int, total: Long, chunk: ByteArray): Long = runBlocking {
        aSocket(selector).tcp().connect("127.0.0.1", port).use { socket ->
            val output = socket.openWriteChannel(autoFlush = false)
            val input = socket.openReadChannel()
            output.writeLong(total)
            var left = total
            while (left > 0) {
                val n = minOf(chunk.size.toLong(), left).toInt()
                output.writeFully(chunk, 0, n)
                left -= n
            }
            output.flush()
            input.readByte() // the sink has every byte
            total
        }
    }

    /** Reads [file] to its end through Ktor's file channel; returns the bytes read. */
    @JvmStatic
    fun readFile(file: File, chunk: ByteArray): Long = runBlocking {
        val channel = file.readChannel()
        var total = 0L
        while (true) {
            val n = channel.readAvailable(chunk, 0, chunk.size)
            if (n == -1) break
            total += n
        }
        total
    }
}
