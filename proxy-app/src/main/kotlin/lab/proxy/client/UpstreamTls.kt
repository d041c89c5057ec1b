/**
 * TLS to an https upstream, one for the whole process: the client trusts only the CA in
 * `UPSTREAM_CA_FILE` (never the system's store, never any certificate), and counts the full
 * handshakes it sees.
 *
 * One [SSLContext] for every client, singleton or per call: the JDK keeps its client session cache
 * in the context, so a new per-call client of Apache, Apache5, OkHttp or Java can resume an earlier
 * session, as one long-lived client does (CIO never resumes: its own TLS sends no session id).
 *
 * The trust manager is called for the server's certificate in every full handshake, never in a
 * resumed one (TLS 1.2 abbreviated, TLS 1.3 PSK), so its calls count full handshakes, with the
 * TLS version and the protocol chosen by ALPN at that moment. CIO calls its two-argument form
 * (its own TLS does 1.2 only, without ALPN).
 */
package lab.proxy.client

import lab.proxy.config.ConfigException
import lab.proxy.config.ProxyConfig
import java.io.File
import java.net.Socket
import java.security.KeyStore
import java.security.cert.CertificateFactory
import java.security.cert.X509Certificate
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.LongAdder
import javax.net.ssl.SSLContext
import javax.net.ssl.SSLEngine
import javax.net.ssl.SSLSocket
import javax.net.ssl.TrustManager
import javax.net.ssl.TrustManagerFactory
import javax.net.ssl.X509ExtendedTrustManager

class UpstreamTls private constructor(val trustManager: CountingTrustManager, val sslContext: SSLContext) {
    /** Full handshakes by "TLS version, ALPN protocol" (e.g. `TLSv1.3 h2`, `TLSv1.2 -`). */
    val fullHandshakes: Map<Pair<String, String>, LongAdder> get() = trustManager.full

    companion object {
        @Volatile
        private var loaded: Pair<String, UpstreamTls>? = null

        /** The process's TLS for [config]'s upstream; null for http. Loaded once per CA file. */
        fun of(config: ProxyConfig): UpstreamTls? {
            val path = config.upstreamCaFile?.takeIf { config.tls } ?: return null
            loaded?.takeIf { it.first == path }?.let { return it.second }
            synchronized(this) {
                loaded?.takeIf { it.first == path }?.let { return it.second }
                return load(path).also { loaded = path to it }
            }
        }

        /** Reads the CA certificates of [caFile]; a [ConfigException] naming `UPSTREAM_CA_FILE` when it holds none. */
        fun load(caFile: String): UpstreamTls {
            val certs = runCatching {
                File(caFile).inputStream().use { CertificateFactory.getInstance("X.509").generateCertificates(it) }
                    .filterIsInstance<X509Certificate>()
            }.getOrDefault(emptyList())
            if (certs.isEmpty()) {
                throw ConfigException("UPSTREAM_CA_FILE='$caFile' holds no PEM certificate; give the lab CA's ca.pem")
            }
            val store = KeyStore.getInstance(KeyStore.getDefaultType()).apply { load(null, null) }
            certs.forEachIndexed { i, cert -> store.setCertificateEntry("upstream-ca-$i", cert) }
            val factory = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm()).apply { init(store) }
            val pkix = factory.trustManagers.filterIsInstance<X509ExtendedTrustManager>().single()
            val trust = CountingTrustManager(pkix)
            val context = SSLContext.getInstance("TLS").apply { init(null, arrayOf<TrustManager>(trust), null) }
            return UpstreamTls(trust, context)
        }
    }

    /** Delegates every check to the CA's own trust manager, then counts the full handshake it was part of. */
    class CountingTrustManager(private val delegate: X509ExtendedTrustManager) : X509ExtendedTrustManager() {
        val full = ConcurrentHashMap<Pair<String, String>, LongAdder>()

        /** Told of each new kind of full handshake (TLS version, ALPN), once: the metrics register its counter. */
        @Volatile
        var onNewKind: (Pair<String, String>) -> Unit = {}

        /** The TLS version of the last full handshake (`TLSv1.3`), null before the first. */
        @Volatile
        var lastTlsVersion: String? = null
            private set

        private fun seen(tls: String?, alpn: String?) {
            val version = tls ?: "unknown"
            lastTlsVersion = version
            val key = version to (alpn?.takeIf { it.isNotEmpty() } ?: "-")
            var added = false
            full.computeIfAbsent(key) { added = true; LongAdder() }.increment()
            if (added) onNewKind(key)
        }

        override fun checkServerTrusted(chain: Array<X509Certificate>, authType: String, engine: SSLEngine) {
            delegate.checkServerTrusted(chain, authType, engine)
            seen(engine.handshakeSession?.protocol, engine.handshakeApplicationProtocol)
        }

        override fun checkServerTrusted(chain: Array<X509Certificate>, authType: String, socket: Socket) {
            delegate.checkServerTrusted(chain, authType, socket)
            val ssl = socket as? SSLSocket
            seen(ssl?.handshakeSession?.protocol, ssl?.handshakeApplicationProtocol)
        }

        /** Only CIO calls this form: its TLS is 1.2, without ALPN. */
        override fun checkServerTrusted(chain: Array<X509Certificate>, authType: String) {
            delegate.checkServerTrusted(chain, authType)
            seen("TLSv1.2", null)
        }

        override fun checkClientTrusted(chain: Array<X509Certificate>, authType: String, engine: SSLEngine) =
            delegate.checkClientTrusted(chain, authType, engine)

        override fun checkClientTrusted(chain: Array<X509Certificate>, authType: String, socket: Socket) =
            delegate.checkClientTrusted(chain, authType, socket)

        override fun checkClientTrusted(chain: Array<X509Certificate>, authType: String) =
            delegate.checkClientTrusted(chain, authType)

        /** The CA: OkHttp builds its certificate chain cleaner from it. */
        override fun getAcceptedIssuers(): Array<X509Certificate> = delegate.acceptedIssuers
    }
}
