"""The unit tier: no part of the lab runs here (no nginx, java, Locust, Prometheus, container).

Every part starts as a `processes.Service`; here that fails the test, so a test that needs a
real part cannot sit in this folder by mistake. `make test-unit` runs this folder alone.
"""

from __future__ import annotations

import pytest

from ktor_lab import processes


@pytest.fixture(autouse=True)
def no_parts(monkeypatch):
    def refuse(self, name, argv, *args, **kwargs):
        raise AssertionError(f"a unit test started a part ({name}: {argv[0]}); move it out of tests/unit/")

    monkeypatch.setattr(processes.Service, "__init__", refuse)
