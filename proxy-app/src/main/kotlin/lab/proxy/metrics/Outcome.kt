/**
 * How one upstream exchange ended: the `outcome` tag of `lab_upstream_requests_seconds`.
 */
package lab.proxy.metrics


enum class Outcome(val tag: String) {
    /** 1xx-3xx from the upstream, body fully relayed. */
    SUCCESS("success"),
    CLIENT_ERROR("client_error"),
    SERVER_ERROR("server_error"),

    /** No connection: refused, unresolvable, unreachable (the proxy answered 502). */
    UNREACHABLE("unreachable"),

    /** Connect or request timeout (the proxy answered 504). */
    TIMEOUT("timeout"),

    /** Any other failure before the proxy answered (502), a body short of its length among them. */
    FAILED("failed"),

    /**
     * The exchange broke after the answer had started, or the caller went away, cut its body or
     * broke its framing (the proxy answered 400).
     */
    ABORTED("aborted"),
    ;

    companion object {
        fun of(status: Int): Outcome = when {
            status >= 500 -> SERVER_ERROR
            status >= 400 -> CLIENT_ERROR
            else -> SUCCESS
        }
    }
}
