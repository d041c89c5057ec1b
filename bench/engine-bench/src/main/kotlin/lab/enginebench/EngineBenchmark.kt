/**
 * `lab study engines`' client side: one engine in this JVM, no proxy, against a local server.
 *
 * Ktor's own client benchmark ran 10 batches of 1000 requests "100 concurrent", but launched
 * all 1000 at once, had no warm-up and reported rps only. Here a batch launches its requests
 * behind a real limit (a semaphore of `--concurrency` permits; 0 = all at once, as published),
 * unmeasured batches come first, and every request's latency is kept (from the moment it may
 * start to its last body byte) for percentiles. Prints one JSON object on stdout.
 *
 * The client is one of three (`--client`): `lab`, the proxy's own, built by its ClientFactory with
 * the same settings (or only some of them: `--parts`), read as the proxy reads (`--read stream`);
 * or a reference written without the lab's code ([PlainClients]): `plain` (the engine's defaults)
 * and `plain-limits` (only the lab's connection limit), read as a user would (`--read text`).
 * `--pipelining on` turns CIO's pipelining on (the lab's client and plain-limits).
 *
 * The lab's client is in src/lab/kotlin ([LabClient]), built only for a release that builds the
 * proxy (pom.xml's lab.modules): a clients-only release (Ktor 3.6.1 here) runs the references.
 *
 * java -jar bench/engine-bench/target/engine-bench.jar --engine cio --url http://127.0.0.1:18080/files/tiny.txt
 */
package lab.enginebench

import lab.plain.PlainClients
import lab.plain.PlainForm

import io.ktor.client.HttpClient
import io.ktor.client.request.get
import io.ktor.client.request.prepareGet
import io.ktor.client.statement.bodyAsChannel
import io.ktor.client.statement.bodyAsText
import io.ktor.client.statement.readRawBytes
import io.ktor.utils.io.discard
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.sync.Semaphore
import kotlinx.coroutines.withTimeout
import java.lang.management.ManagementFactory
import java.util.Properties
import java.util.concurrent.atomic.AtomicInteger
import kotlin.system.exitProcess

/** A bad option: main prints it with the usage and exits 2. */
class OptionException(message: String) : RuntimeException(message)

/** How long one request may take before it counts as failed (`--request-timeout-ms`). */
const val DEFAULT_TIMEOUT_MS = 5_000L

/** Every engine of the lab, by CLIENT_ENGINE's name (a build has those its release publishes). */
val ENGINES = listOf("cio", "apache", "apache5", "okhttp", "java")

data class BenchmarkOptions(
    val engine: String,
    val url: String,
    val batches: Int = 10,
    val batchSize: Int = 1000,
    val concurrency: Int = 100,
    val warmupBatches: Int = 5,
    /** The lab's client's limits (`fair` or `defaults`, CLIENT_LIMITS). */
    val limits: String = "fair",
    val maxConnections: Int = 1000,
    /** `lab`, or a reference: `plain`, `plain-limits` ([PlainForm]). */
    val client: String = "lab",
    /** The lab's client parts (`--parts limits,flags`); all of them by default. */
    val parts: String = "all",
    val read: Read = Read.STREAM,
    /** CIO's pipelining (`--pipelining on`), for the lab's client and plain-limits. */
    val pipelining: Boolean = false,
    val requestTimeoutMs: Int = DEFAULT_TIMEOUT_MS.toInt(),
) {
    companion object {
        private val usage = "usage: --engine ${ENGINES.joinToString("|")} --url URL " +
            "[--batches 10] [--batch-size 1000] [--concurrency 100 (0 = all at once)] [--warmup-batches 5] " +
            "[--limits fair|defaults] [--max-connections 1000] [--client lab|plain|plain-limits] " +
            "[--parts all|limits,flags,engine,timeouts,timeouts-plugin] [--read stream|raw|text] [--pipelining off|on] [--request-timeout-ms 5000]"

        fun parse(args: Array<String>): BenchmarkOptions {
            if (args.size % 2 != 0) throw OptionException(usage)
            val o = args.toList().chunked(2).associate { (k, v) -> k.removePrefix("--") to v }
            fun int(name: String, default: Int, min: Int): Int =
                o[name]?.let { v -> v.toIntOrNull()?.takeIf { it >= min } ?: throw OptionException("--$name '$v': $usage") }
                    ?: default
            val unknown = o.keys - setOf(
                "engine", "url", "batches", "batch-size", "concurrency", "warmup-batches", "limits", "max-connections",
                "client", "parts", "read", "pipelining", "request-timeout-ms",
            )
            if (unknown.isNotEmpty()) throw OptionException("unknown option --${unknown.first()}: $usage")
            val client = o["client"] ?: "lab"
            if (client != "lab" && PlainForm.of(client) == null) throw OptionException("--client '$client': $usage")
            val engine = o["engine"]?.takeIf { it in ENGINES } ?: throw OptionException(usage)
            val pipelining = when (o["pipelining"] ?: "off") {
                "on" -> true
                "off" -> false
                else -> throw OptionException("--pipelining '${o["pipelining"]}': $usage")
            }
            if (pipelining && (engine != "cio" || client == "plain")) {
                throw OptionException("--pipelining on is CIO's setting, for --client lab or plain-limits (not $engine, $client)")
            }
            val options = BenchmarkOptions(
                engine = engine,
                url = o["url"] ?: throw OptionException(usage),
                batches = int("batches", 10, 1),
                batchSize = int("batch-size", 1000, 1),
                concurrency = int("concurrency", 100, 0),
                warmupBatches = int("warmup-batches", 5, 0),
                limits = o["limits"] ?: "fair",
                maxConnections = int("max-connections", 1000, 1),
                client = client,
                parts = o["parts"] ?: "all",
                read = o["read"]?.let { v -> Read.entries.firstOrNull { it.id == v } ?: throw OptionException("--read '$v': $usage") }
                    ?: if (client == "lab") Read.STREAM else Read.TEXT,
                pipelining = pipelining,
                requestTimeoutMs = int("request-timeout-ms", DEFAULT_TIMEOUT_MS.toInt(), 1),
            )
            if (client == "lab") LabClients.of().check(options)
            return options
        }
    }
}

/** How each response is read: as the proxy reads it, or as a user's code would. */
enum class Read(val id: String) {
    /** `prepareGet(url).execute { it.bodyAsChannel().discard() }`: streamed, as the proxy does. */
    STREAM("stream"),

    /** `get(url).readRawBytes()`: whole, without the response pipeline's transformers. */
    RAW("raw"),

    /** `get(url).bodyAsText()`: whole, as text: the plainest user code (needs the default transformers). */
    TEXT("text"),
}

/** The lab's own client, built by the proxy's code (src/lab/kotlin; absent from a clients-only build). */
interface LabClients {
    /** An [OptionException] for options the lab's client cannot take (its limits, its parts). */
    fun check(options: BenchmarkOptions)

    fun create(options: BenchmarkOptions): HttpClient

    /** Every setting in force, as the proxy reports them. */
    fun settings(options: BenchmarkOptions): Map<String, String>

    companion object {
        private val built: LabClients? by lazy {
            runCatching { Class.forName("lab.enginebench.LabClient").getField("INSTANCE").get(null) as LabClients }.getOrNull()
        }

        fun of(): LabClients = built ?: throw OptionException(
            "--client lab: this build of Ktor $KTOR_VERSION has the references only (its release builds the clients " +
                "only: no ktor-server-netty); give --client plain or plain-limits",
        )
    }
}

/** The Ktor release this jar was built with (src/main/build-info, filtered by Maven). */
val KTOR_VERSION: String = Properties().apply {
    LabClients::class.java.getResourceAsStream("/engine-bench-build.properties")?.use { load(it) }
}.getProperty("ktor.version") ?: "unknown"

/** [failures] counts [timeouts] too: requests without their whole answer within the request timeout. */
class BatchResult(val seconds: Double, val latenciesNs: LongArray, val failures: Int, val bytes: Long, val timeouts: Int = 0)

/**
 * One batch: [n] requests launched together, at most [concurrency] in flight (0 = no limit), each
 * given up after [timeoutMs] (a failure and a timeout: CIO's pipelining on 3.5.2 leaves some unanswered).
 */
suspend fun runBatch(
    client: HttpClient,
    url: String,
    n: Int,
    concurrency: Int,
    read: Read = Read.STREAM,
    timeoutMs: Long = DEFAULT_TIMEOUT_MS,
): BatchResult {
    val latencies = LongArray(n)
    val failures = AtomicInteger()
    val timeouts = AtomicInteger()
    val bytes = java.util.concurrent.atomic.AtomicLong()
    val permits = if (concurrency > 0) Semaphore(concurrency) else null
    val t0 = System.nanoTime()
    coroutineScope {
        repeat(n) { i ->
            launch {
                permits?.acquire()
                val start = System.nanoTime()
                try {
                    val status = withTimeout(timeoutMs) { when (read) {
                        Read.STREAM -> client.prepareGet(url).execute { response ->
                            bytes.addAndGet(response.bodyAsChannel().discard())
                            response.status.value
                        }
                        Read.RAW -> client.get(url).let { response ->
                            bytes.addAndGet(response.readRawBytes().size.toLong())
                            response.status.value
                        }
                        Read.TEXT -> client.get(url).let { response ->
                            bytes.addAndGet(response.bodyAsText().length.toLong())
                            response.status.value
                        }
                    } }
                    if (status != 200) failures.incrementAndGet()
                } catch (e: TimeoutCancellationException) {
                    timeouts.incrementAndGet()
                    failures.incrementAndGet()
                } catch (e: Exception) {
                    failures.incrementAndGet()
                } finally {
                    latencies[i] = System.nanoTime() - start
                    permits?.release()
                }
            }
        }
    }
    return BatchResult((System.nanoTime() - t0) / 1e9, latencies, failures.get(), bytes.get(), timeouts.get())
}

fun benchmark(options: BenchmarkOptions): String {
    val plain = PlainForm.of(options.client)
    val client = when {
        plain == null -> LabClients.of().create(options)
        options.pipelining -> PlainClients.pipelined(options.engine, options.maxConnections)
        else -> PlainClients.create(options.engine, plain, options.maxConnections)
    }
    val cpu = ManagementFactory.getOperatingSystemMXBean() as com.sun.management.OperatingSystemMXBean
    var cpuNs = 0L
    val (warmup, measured) = client.use {
        runBlocking(Dispatchers.Default) {
            suspend fun batch() = runBatch(
                client, options.url, options.batchSize, options.concurrency, options.read, options.requestTimeoutMs.toLong(),
            )
            val w = (1..options.warmupBatches).map { batch() }
            val before = cpu.processCpuTime
            val m = (1..options.batches).map { batch() }
            cpuNs = cpu.processCpuTime - before
            w to m
        }
    }
    val all = measured.flatMap { it.latenciesNs.asList() }.sorted()
    fun pct(q: Double): Double = all[((q / 100 * all.size).toInt().coerceIn(1, all.size)) - 1] / 1e6
    val seconds = measured.sumOf { it.seconds }
    val requests = measured.sumOf { it.latenciesNs.size }
    fun batches(list: List<BatchResult>) = list.joinToString(",", "[", "]") {
        """{"seconds":${it.seconds},"rps":${it.latenciesNs.size / it.seconds},"failures":${it.failures},"timeouts":${it.timeouts}}"""
    }
    val settings = when {
        plain == null -> LabClients.of().settings(options)
        // the engine's own, but for the limit (plain-limits) and pipelining where asked
        options.pipelining -> mapOf("pipelining" to "on")
        else -> emptyMap()
    }.entries.joinToString(",", "{", "}") { (k, v) -> "\"$k\":\"$v\"" }
    val parts = if (plain != null) "" else options.parts
    return """{"engine":"${options.engine}","concurrency":${options.concurrency},""" +
        """"client":"${options.client}","parts":"$parts","read":"${options.read.id}",""" +
        """"pipelining":"${if (options.pipelining) "on" else "off"}",""" +
        """"batch_size":${options.batchSize},"batches":${batches(measured)},""" +
        """"warmup_batches":${batches(warmup)},"requests":$requests,""" +
        """"failures":${measured.sumOf { it.failures }},"timeouts":${measured.sumOf { it.timeouts }},""" +
        """"request_timeout_ms":${options.requestTimeoutMs},"bytes":${measured.sumOf { it.bytes }},""" +
        """"rps":${requests / seconds},"cpu_ms_per_request":${cpuNs / 1e6 / requests},""" +
        """"p50_ms":${pct(50.0)},"p90_ms":${pct(90.0)},""" +
        """"p99_ms":${pct(99.0)},"max_ms":${all.last() / 1e6},""" +
        """"ktor_version":"$KTOR_VERSION","java_version":"${System.getProperty("java.version")}",""" +
        """"client_settings":$settings}"""
}

fun main(args: Array<String>) {
    val output = try {
        benchmark(BenchmarkOptions.parse(args))
    } catch (e: OptionException) {
        System.err.println("engine benchmark: ${e.message}")
        exitProcess(2)
    } catch (e: IllegalArgumentException) { // an engine this build's release does not publish
        System.err.println("engine benchmark: ${e.message}")
        exitProcess(2)
    }
    println(output)
}
