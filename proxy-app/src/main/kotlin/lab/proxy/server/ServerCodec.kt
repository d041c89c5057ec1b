/**
 * The server's HTTP/1.1 codec: Netty's own, with the request's `Content-Length` fields kept as they
 * arrived, so that [RequestChecks] judges what the caller sent, not what the decoder made of it:
 * - Netty's decoder frames a request that carries both `Content-Length` and `Transfer-Encoding` by
 *   the latter and drops the former (Netty 4.1; 4.2 refuses the pair itself). Here the
 *   `Content-Length` stays, and the request is refused (RFC 9112 section 6.1).
 * - On HTTP/1.0 Netty skips its check of several `Content-Length` fields, frames the body by the
 *   first and replaces them all with it (`HttpUtil.normalizeAndGetContentLength`): a second request
 *   hidden in the body of `Content-Length: 5` + `Content-Length: 36` is then read as a request of
 *   its own. Every field is counted here as the decoder adds it ([contentLengths]), and more than
 *   one is refused (RFC 9112 section 6.3).
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

    /**
     * The `Content-Length` values of [headers] as the decoder read them, one per field line, before
     * it replaced them; null for headers this codec did not decode.
     */
    fun contentLengths(headers: HttpHeaders): List<String>? = (headers as? RequestHeaders)?.contentLengths

    /** Validated like Netty's defaults; a `Content-Length` beside `Transfer-Encoding` is not removed. */
    private class RequestHeaders : DefaultHttpHeaders(true) {
        val contentLengths = ArrayList<String>(1)

        override fun add(name: CharSequence, value: Any): HttpHeaders {
            if (HttpHeaderNames.CONTENT_LENGTH.contentEqualsIgnoreCase(name)) contentLengths += value.toString()
            return super.add(name, value)
        }

        override fun remove(name: CharSequence): HttpHeaders {
            if (HttpHeaderNames.CONTENT_LENGTH.contentEqualsIgnoreCase(name) && contains(HttpHeaderNames.TRANSFER_ENCODING)) {
                return this
            }
            return super.remove(name)
        }
    }
}
