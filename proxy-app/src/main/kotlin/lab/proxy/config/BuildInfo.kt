/**
 * What this jar was built with: the Ktor release (Maven's `ktor.version`, written into
 * `lab-build.properties` at build time) and so which engines it holds.
 */
package lab.proxy.config

import java.util.Properties

object BuildInfo {
    private val properties = Properties().apply {
        BuildInfo::class.java.getResourceAsStream("/lab-build.properties")?.use { load(it) }
    }

    /** The Ktor release on the classpath, e.g. 3.5.2. */
    val ktorVersion: String = properties.getProperty("ktor.version") ?: "unknown"

    /**
     * The release of Ktor's Micrometer plugin (ktor-server-metrics-micrometer): the build's own,
     * or the release ktor-releases.tsv pins where the registry does not serve the build's.
     */
    val micrometerPluginVersion: String = properties.getProperty("ktor.micrometer.version") ?: "unknown"
}
