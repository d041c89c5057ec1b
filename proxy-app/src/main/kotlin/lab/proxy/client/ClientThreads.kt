/**
 * Where the client's coroutines and blocking calls run (`CLIENT_DISPATCHER`), as each engine takes it:
 * the engine's `dispatcher` (Ktor's coroutines: CIO's selector, OkHttp's body reads, the Java
 * engine's executor), and OkHttp's own `Dispatcher`, whose executor runs its calls.
 *
 * - `io`: Ktor's default, `Dispatchers.IO` (64 threads), OkHttp's own cached pool;
 * - `io:N`: `Dispatchers.IO` raised to N threads (`kotlinx.coroutines.io.parallelism`, set at start
 *   before the pool is first used); OkHttp's pool as it is;
 * - `virtual`: a virtual thread per task (JDK 21 and later) for both.
 *
 * The proxy is built for JDK 17, so the virtual-thread executor is looked up by name at run time.
 */
package lab.proxy.client

import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.asCoroutineDispatcher
import lab.proxy.config.ClientDispatcher
import lab.proxy.config.ProxyConfig
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors

object ClientThreads {
    /** `Dispatchers.IO`'s threads unless told otherwise (kotlinx.coroutines' default). */
    const val IO_THREADS_DEFAULT = 64

    /** Called once at start, before `Dispatchers.IO` is first used: its size for `io:N`. */
    fun prepare(config: ProxyConfig) {
        (config.dispatcher as? ClientDispatcher.IoPool)?.let {
            System.setProperty("kotlinx.coroutines.io.parallelism", it.threads.toString())
        }
    }

    /** A new executor that starts a virtual thread per task (`Executors.newVirtualThreadPerTaskExecutor`). */
    fun newVirtualThreadExecutor(): ExecutorService =
        Executors::class.java.getMethod("newVirtualThreadPerTaskExecutor").invoke(null) as ExecutorService

    /** One for the process: Ktor never closes an engine's dispatcher it was given. */
    private val virtual: CoroutineDispatcher by lazy { newVirtualThreadExecutor().asCoroutineDispatcher() }

    /** The engine's `dispatcher`, or null for Ktor's default (`Dispatchers.IO`, raised or not). */
    fun engineDispatcher(config: ProxyConfig): CoroutineDispatcher? =
        if (config.dispatcher == ClientDispatcher.Virtual) virtual else null

    /** How the dispatcher in force is reported (`lab_proxy_info`). */
    fun settings(config: ProxyConfig): Map<String, String> = linkedMapOf(
        "dispatcher" to config.dispatcher.id,
        "io_threads" to when (val d = config.dispatcher) {
            is ClientDispatcher.IoPool -> d.threads.toString()
            ClientDispatcher.Virtual -> "unused"
            ClientDispatcher.Io -> (System.getProperty("kotlinx.coroutines.io.parallelism") ?: IO_THREADS_DEFAULT.toString())
        },
    )
}
