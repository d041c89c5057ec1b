"""`lab bench` and its references, the minimal Ktor proxy (bench/lean-proxy/) in its two forms, with
real nginx, real proxies and real wrk; `lab bench-locust`, with real Locust against real nginx."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from conftest import sha256_of_stream
from ktor_lab.cases import Case
from ktor_lab.machine import java
from ktor_lab.parts import jfr
from ktor_lab.paths import LEAN_PROXY_JAR
from ktor_lab.processes import free_port
from ktor_lab.stack import Stack

LAB = str(Path(sys.executable).with_name("lab"))


def test_the_lean_proxy_forwards_what_nginx_serves(tmp_path):
    with Stack(tmp_path, java_opts=["-Xmx128m"]) as lab:
        lab.nginx()
        lean = lab.proxy(Case.parse("singleton-okhttp"), jar=LEAN_PROXY_JAR)
        assert requests.get(f"{lean.url}/health", timeout=10).text == "ok lean-okhttp\n"
        r = requests.get(f"{lean.url}/files/tiny.txt", timeout=10)
        assert (r.status_code, r.text) == (200, "Success!\n")
        assert r.headers["Content-Type"].startswith("text/plain")
        assert requests.get(f"{lean.url}/no-such-file", timeout=10).status_code == 404
        assert lean.service.log.name.startswith("lean-proxy-singleton-okhttp")

        streamed = lab.proxy(Case.parse("singleton-okhttp"), jar=LEAN_PROXY_JAR, LEAN_BODY="streamed")
        assert requests.get(f"{streamed.url}/health", timeout=10).text == "ok lean-streamed-okhttp\n"
        r = requests.get(f"{streamed.url}/files/tiny.txt", timeout=10)
        assert (r.status_code, r.text, r.headers["Content-Length"]) == (200, "Success!\n", "9")
        assert requests.get(f"{streamed.url}/no-such-file", timeout=10).status_code == 404
        assert streamed.service.log.name.startswith("lean-proxy-streamed-singleton-okhttp")


@pytest.mark.slow
def test_the_streamed_lean_proxy_passes_a_body_larger_than_its_heap(tmp_path, upstream):
    want = upstream.manifest()["100m.bin"]
    with Stack(tmp_path, java_opts=["-Xmx64m"]) as lab:  # the body could not be held in it
        lean = lab.proxy(
            Case.parse("singleton-apache5"),
            upstream_url=upstream.url,
            jar=LEAN_PROXY_JAR,
            LEAN_BODY="streamed",
        )
        with requests.get(f"{lean.url}/files/100m.bin", stream=True, timeout=60) as r:
            assert r.status_code == 200
            assert r.headers["Content-Length"] == str(want["bytes"])
            assert sha256_of_stream(r) == (want["bytes"], want["sha256"])


def test_the_lean_proxy_refuses_a_body_form_it_does_not_know():
    env = {"PORT": str(free_port()), "UPSTREAM_URL": "http://127.0.0.1:9", "LEAN_BODY": "chunks"}
    r = subprocess.run(
        [java(), "-jar", str(LEAN_PROXY_JAR)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == "lean proxy: configuration error: LEAN_BODY='chunks' is not one of whole, streamed"
    )


@pytest.mark.slow
def test_bench_measures_each_case_beside_the_minimal_proxy_and_says_where_its_cpu_went(tmp_path):
    """One bench with --profile: the ratios to the minimal proxies, and the JFR profile of the window."""
    if shutil.which("wrk") is None:
        pytest.fail("wrk is missing: apt-get install wrk")
    r = subprocess.run(
        [LAB, "bench", "--cases", "singleton-cio", "--profile", "--warmup", "3", "--duration", "3"]
        + ["--connections", "8", "--run-dir", str(tmp_path), "--java-opts=-Xmx256m"]
        + [f"--{p}-port={free_port()}" for p in ("nginx", "nginx-status", "proxy")],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    results = json.loads((tmp_path / "bench.json").read_text())["results"]
    by = {x["target"]: x for x in results}
    # The case, then its engine's minimal proxies (the order over several engines and lifetimes:
    # unit/test_bench_rounds.py).
    assert list(by) == [
        "nginx direct",
        "nginx proxy_pass",
        "singleton-cio",
        "plain cio",
        "plain-limits cio",
        "plain-limits streamed cio",
    ]
    for x in results:
        assert x["requests"] > 0 and x["errors"] == 0, x
    for name in [t for t in by if not t.startswith("nginx")]:
        assert by[name]["cpu_ms_per_request"] > 0, by[name]
        # A proxied request passes between the server's and the client's threads at least once.
        assert by[name]["switches_per_request"] >= 1, by[name]
    for x in ("nginx direct", "nginx proxy_pass"):
        assert by[x]["switches_per_request"] is None
    cio = by["singleton-cio"]
    assert cio["cpu_to"]["plain-limits"]["centre"] == pytest.approx(
        cio["cpu_ms_per_request"] / by["plain-limits cio"]["cpu_ms_per_request"]
    )
    assert cio["rps_to"]["plain"]["centre"] == pytest.approx(cio["rps"] / by["plain cio"]["rps"])
    assert cio["cpu_to"]["plain-limits streamed"]["centre"] == pytest.approx(
        cio["cpu_ms_per_request"] / by["plain-limits streamed cio"]["cpu_ms_per_request"]
    )
    assert by["nginx proxy_pass"]["ratio_to_proxy_pass"] == 1.0
    table = (tmp_path / "bench.md").read_text()
    assert "| plain cio |" in table and "| plain-limits streamed cio |" in table
    assert "CPU x plain-limits" in table and "rps x plain" in table and "switches / req" in table
    # Recorded from before the warm-up, read for the window only: samples outside it are not counted.
    rounds = {x["target"]: x for x in json.loads((tmp_path / "bench.json").read_text())["rounds"]}
    profile = rounds["singleton-cio"]["profile"]
    assert profile["samples"] > 0 and profile["top_frames"]
    recording = tmp_path / "singleton-cio.jfr"
    assert jfr.read(recording).samples >= profile["samples"]
    later = jfr.now() + timedelta(hours=1)
    assert jfr.read(recording, since=later, until=later + timedelta(seconds=10)).samples == 0
    assert abs(sum(profile["owners"].values()) - 1) < 0.01 and {"ktor", "netty"} <= set(profile["owners"])
    assert "nginx direct" in rounds and rounds["nginx direct"]["profile"] is None
    assert "## Profiles of the measured windows (JFR)" in table


@pytest.mark.slow
def test_bench_ladder_climbs_from_the_plain_proxy_to_the_lab_s_each_jvm_warmed_once(tmp_path):
    """Every rung starts (its lean proxy takes the variables of the rung) and serves; each JVM is
    warmed once and measured in both rounds, in turn with the others (A B C A B C)."""
    from ktor_lab import versions
    from ktor_lab.commands.bench import LADDER

    r = subprocess.run(
        [LAB, "bench", "--ladder", "--cases", "singleton-okhttp", "--warmup", "3", "--duration", "1"]
        + ["--repeats", "2", "--settle", "1", "--connections", "8", "--run-dir", str(tmp_path)]
        + ["--java-opts=-Xmx256m"]
        + [f"--{p}-port={free_port()}" for p in ("nginx", "nginx-status", "proxy")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    bench = json.loads((tmp_path / "bench.json").read_text())
    rungs = [f"{rung} okhttp" for rung, _ in LADDER]
    assert [x["target"] for x in bench["results"]] == ["nginx direct", "nginx proxy_pass"] + rungs
    for x in bench["results"]:
        assert x["requests"] > 0 and x["errors"] == 0, x
        assert x["rounds"] == 2, x
    jvm_windows = [(w["round"], w["target"]) for w in bench["rounds"] if w["pid"]]
    assert jvm_windows == [(1, t) for t in rungs] + [(2, t) for t in rungs]
    for target in rungs:
        first, second = [w for w in bench["rounds"] if w["target"] == target]
        assert first["pid"] == second["pid"] and first["warmup_s"] == second["warmup_s"], (first, second)
    assert r.stdout.count("warm: ") == len(rungs)
    # Each rung against the one below it, in both figures, with the settings the run stood on.
    by = {x["target"]: x for x in bench["results"]}
    for below, rung in zip(rungs, rungs[1:], strict=False):
        if "HttpTimeout" not in below:
            assert by[rung]["below"] == below, by[rung]
            assert by[rung]["switches_to_below"]["words"] and by[rung]["cpu_to_below"]["words"], by[rung]
    assert by["lab proxy okhttp"]["goal"].split(" ")[0] in ("within", "above", "at")
    assert (
        bench["settings"]["ktor"] == {"okhttp": versions.default_release().name}
        and bench["settings"]["environment"]["commit"]
    )
    assert all(0 <= w["others_share"] <= 1 for w in bench["rounds"])
    # `--report` writes the same summary and table again from the rounds alone.
    table = (tmp_path / "bench.md").read_text()
    again = subprocess.run(
        [LAB, "bench", "--report", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "bench.md").read_text() == table
    assert json.loads((tmp_path / "bench.json").read_text())["results"] == bench["results"]


def bench_locust(run_dir: Path, locust_port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LAB, "bench-locust", "--users", "10", "--workers", "1", "--duration", "3"]
        + ["--run-dir", str(run_dir), f"--locust-port={locust_port}"]
        + [f"--{p}-port={free_port()}" for p in ("nginx", "nginx-status")],
        capture_output=True,
        text=True,
        timeout=200,
    )


def test_bench_locust_measures_one_process_then_workers_on_the_port_it_is_given(tmp_path):
    port = free_port()
    r = bench_locust(tmp_path, port)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    written = json.loads((tmp_path / "bench-locust.json").read_text())
    settings, rows = written["settings"], written["results"]
    assert settings["users"] == 10 and settings["duration_s"] == 3 and settings["commit"]
    assert settings["machine"]["cpus"] >= 1 and settings["versions"]["locust"] and settings["started"]
    assert [(x["setup"], x["workers"]) for x in rows] == [("one process", 0), ("master + 1 workers", 1)]
    for x in rows:
        assert x["requests"] > 0 and x["failures"] == 0 and x["rps"] > 0, x
    assert list(rows[0]["cpu_peak_percent"]) == ["local"]
    nodes = sorted(rows[1]["cpu_peak_percent"])
    assert nodes[0] == "master" and len(nodes) == 2 and nodes[1].startswith("worker"), nodes
    # Both Locusts served their UI where --locust-port said, one after the other.
    for log in ("one-process.log", "master-+-1-workers-master.log"):
        assert f"web interface at http://127.0.0.1:{port}" in (tmp_path / log).read_text(), log


def test_bench_locust_names_the_option_when_locusts_port_is_taken(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = bench_locust(tmp_path / "run", port)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"lab: cannot start: port {port} (Locust's web UI) is in use: free it, or choose another "
        "with --locust-port"
    ], r.stderr
    assert not (tmp_path / "run").exists()  # checked before anything started
