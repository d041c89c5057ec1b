/**
 * The proxy's entry point: read the configuration, build the client, serve on Netty.
 */
package lab.proxy

import io.ktor.server.application.Application
import io.ktor.server.application.ApplicationStopped
import io.ktor.server.engine.connector
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import org.slf4j.LoggerFactory
import kotlin.system.exitProcess

fun main() {
    val config = try {
        ProxyConfig.fromEnv(System.getenv())
    } catch (e: ConfigException) {
        System.err.println("proxy: configuration error: ${e.message}")
        exitProcess(2)
    }
    ClientFactory.prepareJvm(config)
    LoggerFactory.getLogger("lab.proxy").info(startupSummary(config))

    embeddedServer(Netty, configure = {
        connector {
            host = config.host
            port = config.port
        }
        shutdownGracePeriod = 1_000
        shutdownTimeout = 5_000
    }) {
        module(config)
    }.start(wait = true)
}

/** Wires the proxy; tests call it with their own config, metrics and client provider. */
fun Application.module(
    config: ProxyConfig,
    metrics: ProxyMetrics = ProxyMetrics(config),
    clients: ClientProvider = ClientProvider.create(config.lifetime, metrics.counters) { ClientFactory.create(config) },
) {
    configureMetrics(metrics)
    if (config.accessLog) configureAccessLog()
    configureRouting(config, clients, metrics)
    monitor.subscribe(ApplicationStopped) { clients.close() }
}

/** One line per setting, printed at start so every log shows what produced its numbers. */
fun startupSummary(config: ProxyConfig): String = buildString {
    append("proxy case=${config.caseName} listen=${config.host}:${config.port} upstream=${config.upstreamUrl}")
    append(" access_log=${if (config.accessLog) "on" else "off"} ktor=${ProxyMetrics.KTOR_VERSION}")
    append(" java=${System.getProperty("java.version")}")
    ClientFactory.effectiveSettings(config).forEach { (k, v) -> append(" $k=$v") }
}
