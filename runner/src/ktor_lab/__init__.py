"""Ktor client engine lab: run the parts natively on loopback, test them, measure them."""
