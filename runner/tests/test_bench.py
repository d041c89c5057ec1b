"""`lab bench` and its reference, the minimal Ktor proxy (lean-proxy/), with real nginx, real
proxies and real wrk."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from ktor_lab.paths import LEAN_PROXY_JAR
from ktor_lab.processes import free_port
from ktor_lab.stack import Stack

LAB = str(Path(sys.executable).with_name("lab"))


def test_the_lean_proxy_forwards_what_nginx_serves(tmp_path):
    with Stack(tmp_path, java_opts=["-Xmx128m"]) as lab:
        lab.nginx()
        lean = lab.proxy("singleton-okhttp", jar=LEAN_PROXY_JAR)
        assert requests.get(f"{lean.url}/health", timeout=10).text == "ok lean-okhttp\n"
        r = requests.get(f"{lean.url}/files/tiny.txt", timeout=10)
        assert (r.status_code, r.text) == (200, "Success!\n")
        assert r.headers["Content-Type"].startswith("text/plain")
        assert requests.get(f"{lean.url}/no-such-file", timeout=10).status_code == 404
        assert lean.service.log.name.startswith("lean-proxy-singleton-okhttp")


@pytest.mark.slow
def test_bench_measures_each_case_beside_the_minimal_proxy(tmp_path):
    if shutil.which("wrk") is None:
        pytest.fail("wrk is missing: apt-get install wrk")
    r = subprocess.run(
        [LAB, "bench", "--cases", "singleton-cio,per-call-java", "--warmup", "5", "--duration", "3"]
        + ["--connections", "8", "--run-dir", str(tmp_path), "--java-opts=-Xmx256m"]
        + [f"--{p}-port={free_port()}" for p in ("nginx", "nginx-status", "proxy")],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    results = json.loads((tmp_path / "bench.json").read_text())["results"]
    by = {x["target"]: x for x in results}
    # Each engine's minimal proxy right after its first case; per-call Java has no singleton
    # case here, so its engine's reference follows it.
    assert list(by) == [
        "nginx direct",
        "nginx proxy_pass",
        "singleton-cio",
        "lean cio",
        "per-call-java",
        "lean java",
    ]
    for x in results:
        assert x["requests"] > 0 and x["errors"] == 0, x
    for name in ("singleton-cio", "lean cio", "per-call-java", "lean java"):
        assert by[name]["cpu_ms_per_request"] > 0, by[name]
    assert by["singleton-cio"]["cpu_to_lean"] == pytest.approx(
        by["singleton-cio"]["cpu_ms_per_request"] / by["lean cio"]["cpu_ms_per_request"]
    )
    assert by["nginx proxy_pass"]["ratio_to_proxy_pass"] == 1.0
    table = (tmp_path / "bench.md").read_text()
    assert "| lean cio |" in table and "CPU x lean" in table
