package lab.lean

import lab.proxy.client.ClientPart
import lab.proxy.config.ConfigException
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertTrue

class LeanOptionsTest {
    @Test
    fun `by default the reference, a plain client with the lab's limits, bodies whole, nothing of the lab's server`() {
        assertEquals(LeanOptions(LeanBody.WHOLE, "plain-limits", ClientPart.ALL, emptySet()), LeanOptions.fromEnv(emptyMap()))
    }

    @Test
    fun `a rung of the ladder is spelled in its variables`() {
        val rung = LeanOptions.fromEnv(
            mapOf("LEAN_BODY" to "streamed", "LEAN_CLIENT" to "lab", "LEAN_PARTS" to "limits,timeouts", "LEAN_SERVER" to "metrics,guards"),
        )
        assertEquals(LeanOptions(LeanBody.STREAMED, "lab", setOf(ClientPart.LIMITS, ClientPart.TIMEOUTS), setOf(LeanServer.METRICS, LeanServer.GUARDS)), rung)
        assertEquals("lean-streamed-okhttp", rung.name("okhttp"))
    }

    @Test
    fun `a value it does not know names its variable`() {
        for ((name, value) in listOf("LEAN_BODY" to "chunks", "LEAN_CLIENT" to "lean", "LEAN_PARTS" to "pool", "LEAN_SERVER" to "tracing")) {
            val e = assertFailsWith<ConfigException> { LeanOptions.fromEnv(mapOf(name to value)) }
            assertTrue(e.message!!.startsWith("$name='$value'"), e.message)
        }
    }
}
