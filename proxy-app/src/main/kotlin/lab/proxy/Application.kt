/**
 * The proxy's entry point: read the configuration, build the client, serve on Netty.
 *
 * The table of contents: each package below has one concern and imports only those after it in
 * this list (runner/tests/unit/test_proxy_house.py reads the imports and fails on a cycle).
 * - `lab.proxy.relay`: one request through, from the caller to the upstream and back (routes,
 *   checks, the target and headers, the bodies, the request timeout, how a failure is answered);
 * - `lab.proxy.metrics`: what `/metrics` exports, how an exchange ended ([lab.proxy.metrics.Outcome]);
 * - `lab.proxy.server`: the guards and codec on the callers' Netty connections;
 * - `lab.proxy.client.engines`: one setup per engine, compiled per release, found by name;
 * - `lab.proxy.client`: the client under test (engine contract, factory, lifetime, TLS, pools);
 * - `lab.proxy.config`: the settings read from the environment, and what the jar was built with.
 */
package lab.proxy

import io.ktor.server.application.Application
import io.ktor.server.application.ApplicationStopped
import io.ktor.server.engine.connector
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientProvider
import lab.proxy.config.ConfigException
import lab.proxy.config.ProxyConfig
import lab.proxy.metrics.ProxyMetrics
import lab.proxy.metrics.configureAccessLog
import lab.proxy.metrics.configureMetrics
import lab.proxy.relay.configureRouting
import lab.proxy.server.ServerCodec
import lab.proxy.server.ServerGuards
import org.slf4j.LoggerFactory
import kotlin.system.exitProcess

fun main() {
    val config = try {
        ProxyConfig.fromEnv(System.getenv()).also { ClientFactory.prepareJvm(it) }
    } catch (e: ConfigException) {
        System.err.println("proxy: configuration error: ${e.message}")
        exitProcess(2)
    }
    LoggerFactory.getLogger("lab.proxy").info(startupSummary(config))

    val server = embeddedServer(Netty, configure = {
        connector {
            host = config.host
            port = config.port
        }
        shutdownGracePeriod = 1_000
        shutdownTimeout = 5_000
        channelPipelineConfig = { ServerGuards.install(this, config) }
        httpServerCodec = { ServerCodec.create(maxInitialLineLength, maxHeaderSize, maxChunkSize) }
    }) {
        module(config)
    }
    try {
        server.start(wait = true)
    } catch (e: Exception) {
        val why = bindFailure(e, config) ?: throw e
        System.err.println("proxy: configuration error: $why")
        exitProcess(2)
    }
}

/**
 * A one-line reason naming the variable to change when the server cannot listen; null otherwise.
 * Netty's epoll transport reports bind errors as its own IOException with the errno's text.
 */
fun bindFailure(error: Throwable, config: ProxyConfig): String? {
    val chain = generateSequence(error) { it.cause.takeIf { c -> c !== it } }.take(16).toList()
    val messages = chain.joinToString(" ") { it.message.orEmpty() }
    val at = "${config.host}:${config.port}"
    return when {
        "Address already in use" in messages -> "cannot listen on $at: the port is in use; set PORT to a free port"
        chain.any { it is java.nio.channels.UnresolvedAddressException || it is java.net.UnknownHostException } ->
            "cannot listen on $at: HOST='${config.host}' is not an address; " +
                "set HOST to one of this machine's (e.g. 127.0.0.1 or 0.0.0.0)"
        "Cannot assign requested address" in messages || chain.any { it is java.net.BindException } ->
            "cannot listen on $at: not an address of this machine; set HOST to one (e.g. 127.0.0.1 or 0.0.0.0)"
        else -> null
    }
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
