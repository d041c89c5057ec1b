/**
 * `lab study engines`' client side: one engine in this JVM, no proxy, against a local server.
 *
 * Ktor's own client benchmark ran 10 batches of 1000 requests "100 concurrent", but launched
 * all 1000 at once, had no warm-up and reported rps only. Here a batch launches its requests
 * behind a real limit (a semaphore of `--concurrency` permits; 0 = all at once, as published),
 * unmeasured batches come first, and every request's latency is kept (from the moment it may
 * start to its last body byte) for percentiles. Prints one JSON object on stdout.
 *
 * The client is one of three (`--client`): `lab`, the proxy's own, built by [ClientFactory] with
 * the same settings (or only some of them: `--parts`), read as the proxy reads (`--read stream`);
 * or a reference written without the lab's code ([PlainClients]): `plain` (the engine's defaults)
 * and `plain-limits` (only the lab's connection limit), read as a user would (`--read text`).
 *
 * java -jar bench/engine-bench/target/engine-bench.jar --engine cio --url http://127.0.0.1:18080/files/tiny.txt
 */
package lab.enginebench

import lab.plain.PlainClients
import lab.plain.PlainForm
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientPart
import lab.proxy.config.ConfigException
import lab.proxy.config.Engine
import lab.proxy.config.Limits
import lab.proxy.config.ProxyConfig
import lab.proxy.config.byId
import lab.proxy.metrics.ProxyMetrics

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
import kotlinx.coroutines.sync.Semaphore
import java.lang.management.ManagementFactory
import java.util.concurrent.atomic.AtomicInteger
import kotlin.system.exitProcess

data class BenchmarkOptions(
    val engine: Engine,
    val url: String,
    val batches: Int = 10,
    val batchSize: Int = 1000,
    val concurrency: Int = 100,
    val warmupBatches: Int = 5,
    val limits: Limits = Limits.FAIR,
    val maxConnections: Int = 1000,
    /** `lab`, or a reference: `plain`, `plain-limits` ([PlainForm]). */
    val client: String = "lab",
    /** The lab's client parts (`--parts limits,flags`); all of them by default. */
    val parts: Set<ClientPart> = ClientPart.ALL,
    val read: Read = Read.STREAM,
) {
    companion object {
        private val usage = "usage: --engine ${Engine.entries.joinToString("|") { it.id }} --url URL " +
            "[--batches 10] [--batch-size 1000] [--concurrency 100 (0 = all at once)] [--warmup-batches 5] " +
            "[--limits fair|defaults] [--max-connections 1000] [--client lab|plain|plain-limits] " +
            "[--parts all|${ClientPart.entries.joinToString(",") { it.id }}] [--read stream|raw|text]"

        fun parse(args: Array<String>): BenchmarkOptions {
            if (args.size % 2 != 0) throw ConfigException(usage)
            val o = args.toList().chunked(2).associate { (k, v) -> k.removePrefix("--") to v }
            fun int(name: String, default: Int, min: Int): Int =
                o[name]?.let { v -> v.toIntOrNull()?.takeIf { it >= min } ?: throw ConfigException("--$name '$v': $usage") }
                    ?: default
            val unknown = o.keys - setOf(
                "engine", "url", "batches", "batch-size", "concurrency", "warmup-batches", "limits", "max-connections",
                "client", "parts", "read",
            )
            if (unknown.isNotEmpty()) throw ConfigException("unknown option --${unknown.first()}: $usage")
            val client = o["client"] ?: "lab"
            if (client != "lab" && PlainForm.of(client) == null) throw ConfigException("--client '$client': $usage")
            return BenchmarkOptions(
                engine = o["engine"]?.let { Engine.entries.byId(it) } ?: throw ConfigException(usage),
                url = o["url"] ?: throw ConfigException(usage),
                batches = int("batches", 10, 1),
                batchSize = int("batch-size", 1000, 1),
                concurrency = int("concurrency", 100, 0),
                warmupBatches = int("warmup-batches", 5, 0),
                limits = o["limits"]?.let { v -> Limits.entries.byId(v) ?: throw ConfigException(usage) }
                    ?: Limits.FAIR,
                maxConnections = int("max-connections", 1000, 1),
                client = client,
                parts = o["parts"]?.let { ClientPart.parse(it) } ?: ClientPart.ALL,
                read = o["read"]?.let { v -> Read.entries.firstOrNull { it.id == v } ?: throw ConfigException("--read '$v': $usage") }
                    ?: if (client == "lab") Read.STREAM else Read.TEXT,
            )
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

class BatchResult(val seconds: Double, val latenciesNs: LongArray, val failures: Int, val bytes: Long)

/** One batch: [n] requests launched together, at most [concurrency] in flight (0 = no limit). */
suspend fun runBatch(client: HttpClient, url: String, n: Int, concurrency: Int, read: Read = Read.STREAM): BatchResult {
    val latencies = LongArray(n)
    val failures = AtomicInteger()
    val bytes = java.util.concurrent.atomic.AtomicLong()
    val permits = if (concurrency > 0) Semaphore(concurrency) else null
    val t0 = System.nanoTime()
    coroutineScope {
        repeat(n) { i ->
            launch {
                permits?.acquire()
                val start = System.nanoTime()
                try {
                    val status = when (read) {
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
                    }
                    if (status != 200) failures.incrementAndGet()
                } catch (e: Exception) {
                    failures.incrementAndGet()
                } finally {
                    latencies[i] = System.nanoTime() - start
                    permits?.release()
                }
            }
        }
    }
    return BatchResult((System.nanoTime() - t0) / 1e9, latencies, failures.get(), bytes.get())
}

fun benchmark(options: BenchmarkOptions): String {
    val config = ProxyConfig(engine = options.engine, maxConnections = options.maxConnections, limits = options.limits)
    val plain = PlainForm.of(options.client)
    val client = if (plain != null) {
        PlainClients.create(options.engine.id, plain, options.maxConnections)
    } else {
        ClientFactory.prepareJvm(config)
        ClientFactory.create(config, options.parts)
    }
    val cpu = ManagementFactory.getOperatingSystemMXBean() as com.sun.management.OperatingSystemMXBean
    var cpuNs = 0L
    val (warmup, measured) = client.use {
        runBlocking(Dispatchers.Default) {
            suspend fun batch() = runBatch(client, options.url, options.batchSize, options.concurrency, options.read)
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
        """{"seconds":${it.seconds},"rps":${it.latenciesNs.size / it.seconds},"failures":${it.failures}}"""
    }
    val settings = if (plain != null) {
        "{}" // the engine's own, but for the limit (plain-limits)
    } else {
        ClientFactory.effectiveSettings(config).entries.joinToString(",", "{", "}") { (k, v) -> "\"$k\":\"$v\"" }
    }
    val parts = if (plain != null) "" else options.parts.joinToString(",") { it.id }
    return """{"engine":"${options.engine.id}","concurrency":${options.concurrency},""" +
        """"client":"${options.client}","parts":"$parts","read":"${options.read.id}",""" +
        """"batch_size":${options.batchSize},"batches":${batches(measured)},""" +
        """"warmup_batches":${batches(warmup)},"requests":$requests,""" +
        """"failures":${measured.sumOf { it.failures }},"bytes":${measured.sumOf { it.bytes }},""" +
        """"rps":${requests / seconds},"cpu_ms_per_request":${cpuNs / 1e6 / requests},""" +
        """"p50_ms":${pct(50.0)},"p90_ms":${pct(90.0)},""" +
        """"p99_ms":${pct(99.0)},"max_ms":${all.last() / 1e6},""" +
        """"ktor_version":"${ProxyMetrics.KTOR_VERSION}","java_version":"${System.getProperty("java.version")}",""" +
        """"client_settings":$settings}"""
}

fun main(args: Array<String>) {
    val options = try {
        BenchmarkOptions.parse(args)
    } catch (e: ConfigException) {
        System.err.println("engine benchmark: ${e.message}")
        exitProcess(2)
    }
    println(benchmark(options))
}
