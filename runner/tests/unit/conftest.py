"""The unit tier: no part of the lab runs here (no nginx, java, Locust, Prometheus, container).

Every part starts as a `processes.Service`; here that fails the test, so a test that needs a
real part cannot sit in this folder by mistake. The JDKs a plan names are looked up among two
made here (17 and 25), not the machine's, so the tier needs no Java installed. `make test-unit`
runs this folder alone.
"""

from __future__ import annotations

import pytest

from ktor_lab import processes, versions


@pytest.fixture(autouse=True)
def no_parts(monkeypatch):
    def refuse(self, name, argv, *args, **kwargs):
        raise AssertionError(f"a unit test started a part ({name}: {argv[0]}); move it out of tests/unit/")

    monkeypatch.setattr(processes.Service, "__init__", refuse)


@pytest.fixture(autouse=True)
def fake_jdks(tmp_path_factory, monkeypatch):
    """JDK 17 (the default `java`) and 25 in a folder of their own: a release file and a bin/java
    each, which is all versions.jdks() reads."""
    jvm = tmp_path_factory.mktemp("jvm")
    for folder, version in (("java-17-fake", "17.0.21"), ("temurin-25-fake", "25.0.1")):
        (jvm / folder / "bin").mkdir(parents=True)
        (jvm / folder / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
        (jvm / folder / "release").write_text(f'JAVA_VERSION="{version}"\n')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(versions, "JVM_DIRS", (jvm,))
    monkeypatch.setattr(versions, "default_jdk", lambda: versions.Jdk("17.0.21", jvm / "java-17-fake"))
    return jvm
