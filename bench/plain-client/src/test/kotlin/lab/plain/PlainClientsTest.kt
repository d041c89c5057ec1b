package lab.plain

import io.ktor.client.engine.cio.CIOEngineConfig
import kotlin.test.Test
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertFalse

class PlainClientsTest {
    @Test
    fun `plain clients keep the engine's defaults`() {
        PlainClients.plain("cio").use { client ->
            assertEquals(100, (client.engineConfig as CIOEngineConfig).endpoint.maxConnectionsPerRoute)
        }
    }

    @Test
    fun `with limits, only the connection limit is set, on the engine's own knob`() {
        PlainClients.withLimits("cio", 77).use { client ->
            val cio = client.engineConfig as CIOEngineConfig
            assertEquals(77, cio.maxConnectionsCount)
            assertEquals(77, cio.endpoint.maxConnectionsPerRoute)
            assertEquals(CIOEngineConfig().requestTimeout, cio.requestTimeout)
            assertFalse(cio.pipelining)
        }
        // OkHttp's dispatcher is not readable through Ktor: engine-bench's tests count it in flight.
    }

    @Test
    fun `every engine of the build makes both forms, and an unknown one is refused`() {
        for (engine in PlainClients.engines) {
            for (form in PlainForm.entries) PlainClients.create(engine, form, 10).close()
        }
        assertFailsWith<IllegalArgumentException> { PlainClients.plain("netty") }
        assertEquals(PlainForm.LIMITS, PlainForm.of("plain-limits"))
    }
}
