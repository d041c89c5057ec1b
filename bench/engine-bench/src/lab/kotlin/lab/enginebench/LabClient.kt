/**
 * The lab's client in the benchmark: the proxy's own ClientFactory, with the proxy's settings.
 * This source root is compiled only for a release that builds the proxy (pom.xml's lab-client
 * profile); the driver finds this object by name ([LabClients]).
 */
package lab.enginebench

import io.ktor.client.HttpClient
import lab.proxy.client.ClientFactory
import lab.proxy.client.ClientPart
import lab.proxy.config.ConfigException
import lab.proxy.config.Engine
import lab.proxy.config.Limits
import lab.proxy.config.ProxyConfig
import lab.proxy.config.byId

object LabClient : LabClients {
    override fun check(options: BenchmarkOptions) {
        config(options)
        parts(options)
    }

    override fun create(options: BenchmarkOptions): HttpClient {
        val config = config(options)
        ClientFactory.prepareJvm(config)
        return ClientFactory.create(config, parts(options))
    }

    override fun settings(options: BenchmarkOptions): Map<String, String> = ClientFactory.effectiveSettings(config(options))

    fun parts(options: BenchmarkOptions): Set<ClientPart> = try {
        ClientPart.parse(options.parts)
    } catch (e: ConfigException) {
        throw OptionException("--parts '${options.parts}': ${e.message}")
    }

    fun config(options: BenchmarkOptions) = ProxyConfig(
        engine = Engine.entries.byId(options.engine) ?: throw OptionException("--engine '${options.engine}'"),
        maxConnections = options.maxConnections,
        limits = Limits.entries.byId(options.limits)
            ?: throw OptionException("--limits '${options.limits}': fair or defaults"),
        pipelining = options.pipelining,
    )
}
