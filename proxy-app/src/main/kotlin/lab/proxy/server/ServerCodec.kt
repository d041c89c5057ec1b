/**
 * The server's HTTP/1.1 codec: Netty's own, with one change. Netty's decoder frames a request that
 * carries both `Content-Length` and `Transfer-Encoding` by the latter and silently drops the former,
 * so the proxy would answer it and keep the connection open. RFC 9112 section 6.1: such a request
 * may be processed by Transfer-Encoding alone, but "regardless, the server MUST close the
 * connection after responding". Here the decoder still frames it by Transfer-Encoding, and the
 * `Content-Length` stays visible, so [lab.proxy.relay.RequestChecks] refuses the request (400) and closes.
 */
package lab.proxy.server

import io.netty.handler.codec.http.DefaultHttpHeaders
import io.netty.handler.codec.http.DefaultHttpHeadersFactory
import io.netty.handler.codec.http.HttpDecoderConfig
import io.netty.handler.codec.http.HttpHeaderNames
import io.netty.handler.codec.http.HttpHeaders
import io.netty.handler.codec.http.HttpHeadersFactory
import io.netty.handler.codec.http.HttpServerCodec

object ServerCodec {
    /** Netty's server codec with Ktor's limits, keeping a request's `Content-Length` beside `Transfer-Encoding`. */
    fun create(maxInitialLineLength: Int, maxHeaderSize: Int, maxChunkSize: Int): HttpServerCodec = HttpServerCodec(
        HttpDecoderConfig()
            .setMaxInitialLineLength(maxInitialLineLength)
            .setMaxHeaderSize(maxHeaderSize)
            .setMaxChunkSize(maxChunkSize)
            .setHeadersFactory(RequestHeadersFactory),
    )

    private object RequestHeadersFactory : HttpHeadersFactory {
        override fun newHeaders(): HttpHeaders = RequestHeaders()
        override fun newEmptyHeaders(): HttpHeaders = DefaultHttpHeadersFactory.headersFactory().newEmptyHeaders()
    }

    /** Validated like Netty's defaults; a `Content-Length` beside `Transfer-Encoding` is not removed. */
    private class RequestHeaders : DefaultHttpHeaders(true) {
        override fun remove(name: CharSequence): HttpHeaders {
            if (HttpHeaderNames.CONTENT_LENGTH.contentEqualsIgnoreCase(name) && contains(HttpHeaderNames.TRANSFER_ENCODING)) {
                return this
            }
            return super.remove(name)
        }
    }
}
