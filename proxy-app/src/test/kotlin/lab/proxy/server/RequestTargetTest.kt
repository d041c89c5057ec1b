package lab.proxy.server

import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.CsvSource
import org.junit.jupiter.params.provider.ValueSource
import kotlin.test.assertEquals
import kotlin.test.assertIs

class RequestTargetTest {
    @ParameterizedTest(name = "{0} -> {1}")
    @CsvSource(
        delimiter = ' ',
        value = [
            "/ /",
            "/files/1k.bin /files/1k.bin",
            "/echo?a=%20b&c=+&d=%2F /echo?a=%20b&c=+&d=%2F",
            "/a/./b /a/b",
            "/a/b/.. /a/",
            "/a/b/../c /a/c",
            "/a/%2e%2E/c /c",
            "/a/%2e/c /a/c",
            "/a//b /a//b",
            "/caf%C3%A9 /caf%C3%A9",
            "http://evil.example/files/x /files/x",
            "http://evil.example:8080 /",
            "HTTP://evil.example?q=1 /?q=1",
            "/p?x=../../etc /p?x=../../etc",
            "/frag#part /frag",
            "/x/.well-known/a /x/.well-known/a",
            "/x/..y /x/..y",
        ],
    )
    fun `forwards a normalized path and keeps the query`(raw: String, expected: String) {
        assertEquals(Target.Forward(expected), RequestTarget.normalize(raw))
    }

    @ParameterizedTest
    @ValueSource(
        strings = [
            "/..", "/../etc/passwd", "/a/../../etc/passwd", "/%2e%2e/etc/passwd", "/%2E%2E%2Fetc%2Fpasswd",
            "/a/..%2f..%2fetc", "/a%5c..%5c..", "/a%00b", "/a%0d%0aSet-Cookie:x", "/bad%zz", "/trunc%2",
            "*", "evil.example/x", "/a b", "/a\tb", "/a\u007fb", "/a\\b",
        ],
    )
    fun `rejects targets that could escape the upstream root or smuggle bytes`(raw: String) {
        assertIs<Target.Reject>(RequestTarget.normalize(raw), raw)
    }
}
