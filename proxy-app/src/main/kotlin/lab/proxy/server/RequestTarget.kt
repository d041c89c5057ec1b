/**
 * Turns a client's raw request-target into the path and query sent upstream.
 *
 * The proxy only ever talks to `UPSTREAM_URL`: the authority of an absolute-form target is
 * dropped, dot segments (also percent-encoded ones) are resolved, and a target that would
 * climb above the root, hide a `/` or `\` in an encoded segment, or carry control characters
 * is rejected. Everything else is kept byte for byte, so the upstream sees what the client sent.
 */
package lab.proxy.server


sealed interface Target {
    /** [pathAndQuery] starts with `/`; append it to the upstream base URL. */
    data class Forward(val pathAndQuery: String) : Target

    data class Reject(val reason: String) : Target
}

object RequestTarget {
    private val absoluteForm = Regex("^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")

    fun normalize(raw: String): Target {
        if (raw.any { it <= ' ' || it == '\u007f' }) return Target.Reject("control character or space in target")
        // Most targets have nothing to resolve or decode: no escape, no dot segment, no fragment,
        // no backslash. Each step below would leave such a target as it is.
        if (raw.startsWith("/") && raw.none { it == '%' || it == '\\' || it == '#' } && "/." !in raw) {
            return Target.Forward(raw)
        }
        val originForm = when {
            raw.startsWith("/") -> raw
            absoluteForm.containsMatchIn(raw) -> raw.replaceFirst(absoluteForm, "").ifEmpty { "/" }
            else -> return Target.Reject("target is neither origin-form nor absolute-form")
        }.substringBefore('#')
        if (!originForm.startsWith("/") && !originForm.startsWith("?")) {
            return Target.Reject("target is neither origin-form nor absolute-form")
        }

        val rawPath = originForm.substringBefore('?').ifEmpty { "/" }
        val query = if ('?' in originForm) "?" + originForm.substringAfter('?') else ""

        val kept = ArrayDeque<String>()
        val segments = rawPath.substring(1).split('/')
        for ((index, segment) in segments.withIndex()) {
            val decoded = percentDecode(segment) ?: return Target.Reject("bad percent-encoding in path")
            if ('/' in decoded || '\\' in decoded || decoded.any { it < ' ' }) {
                return Target.Reject("encoded separator or control character in path")
            }
            val last = index == segments.lastIndex
            when (decoded) {
                "." -> if (last) kept.addLast("")
                ".." -> {
                    if (kept.isEmpty()) return Target.Reject("path climbs above the root")
                    kept.removeLast()
                    if (last) kept.addLast("")
                }

                else -> kept.addLast(segment)
            }
        }
        return Target.Forward("/" + kept.joinToString("/") + query)
    }

    /** Decodes `%XX` escapes only (not `+`); null when an escape is malformed. */
    private fun percentDecode(s: String): String? {
        if ('%' !in s) return s
        val out = java.io.ByteArrayOutputStream(s.length)
        var i = 0
        while (i < s.length) {
            val c = s[i]
            if (c == '%') {
                if (i + 2 >= s.length) return null
                val hi = Character.digit(s[i + 1], 16)
                val lo = Character.digit(s[i + 2], 16)
                if (hi < 0 || lo < 0) return null
                out.write(hi * 16 + lo)
                i += 3
            } else {
                out.write(c.toString().toByteArray(Charsets.UTF_8))
                i++
            }
        }
        return out.toString(Charsets.UTF_8)
    }
}
