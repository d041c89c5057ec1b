package lab.proxy.metrics

import java.io.File
import kotlin.io.path.createTempFile
import kotlin.test.Test
import kotlin.test.assertEquals

class UpstreamSocketsTest {
    private fun table(vararg rows: String): File = createTempFile("tcp", ".txt").toFile().apply {
        deleteOnExit()
        fill(*rows)
    }

    private fun File.fill(vararg rows: String) = writeText(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
            rows.joinToString("") { "$it\n" },
    )

    @Test
    fun `counts the sockets to the upstream's port by state, from the kernel's tables`() {
        // 0x1F90 = 8080, 0x0050 = 80; states 01 ESTABLISHED, 06 TIME_WAIT, 0A LISTEN.
        val v4 = table()
        val v6 = table()
        val sockets = UpstreamSockets(8080, listOf(v4, v6, File("/no/such/table")))
        v4.fill(
            "   0: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0 0 1 1",
            "   1: 0100007F:C351 0100007F:1F90 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3",
            "   2: 0100007F:C352 0100007F:1F90 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3",
            "   3: 0100007F:1F90 0100007F:C353 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3", // nginx's side
            "   4: 0100007F:C354 0100007F:0050 01 00000000:00000000 00:00000000 00000000  0 0 1 1", // another port
            "   5: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1 1",
        )
        v6.fill(
            "   0: 0000000000000000FFFF00000100007F:C355 0000000000000000FFFF00000100007F:1F90 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3",
        )
        assertEquals(UpstreamSockets.Counts(1, 3), sockets.counts())
    }

    @Test
    fun `sockets in TIME_WAIT before the proxy started are not its own, for the minute they can live`() {
        val earlier = "   1: 0100007F:C351 0100007F:1F90 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3"
        val v4 = table(earlier)
        var now = 0L
        val sockets = UpstreamSockets(8080, listOf(v4)) { now }
        assertEquals(UpstreamSockets.Counts(0, 0), sockets.counts())
        v4.fill(
            earlier,
            "   2: 0100007F:C352 0100007F:1F90 06 00000000:00000000 03:00000F9B 00000000  0 0 0 3",
            "   3: 0100007F:C353 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0 0 1 1",
        )
        now += 1_000_000_000L
        assertEquals(UpstreamSockets.Counts(1, 1), sockets.counts())
        // Past 60 s the kernel has dropped every socket older than the proxy: whatever is there is its own.
        now += 61_000_000_000L
        assertEquals(UpstreamSockets.Counts(1, 2), sockets.counts())
    }

    @Test
    fun `the upstream's port, from its URL or its scheme`() {
        assertEquals(80, UpstreamSockets.portOf("http://nginx"))
        assertEquals(443, UpstreamSockets.portOf("https://nginx/base"))
        assertEquals(18443, UpstreamSockets.portOf("https://127.0.0.1:18443"))
    }
}
