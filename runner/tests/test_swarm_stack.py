"""The swarm stack on a real one-node Docker Swarm: `lab swarm run` and `lab swarm down` as a
user runs them (docs/swarm.md), on the engine the compose suite uses. `lab swarm run` measures
through `lab run`'s pipeline: its results.json and report are checked as a user reads them.

When the engine is not in a swarm, the test makes it a one-node swarm (`docker swarm init
--advertise-addr 127.0.0.1`) and leaves the swarm again afterwards; an engine that already is
in one is used as it is, and only the test's own stack (and registry) is removed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from conftest import answers, scrape, wait_until, window_counts_agree
from ktor_lab.metrics import query
from ktor_lab.parts import compose, grafana, swarm
from ktor_lab.processes import free_port, local_url

pytestmark = pytest.mark.compose

LAB = [str(Path(sys.executable).with_name("lab"))]


@pytest.fixture(scope="module")
def one_node_swarm(compose_engine) -> Iterator[str]:
    """This engine as a swarm manager; yields its node's hostname."""
    state = subprocess.run(
        ["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True, text=True
    ).stdout.strip()
    made = state != "active"
    networks = subprocess.run(
        ["docker", "network", "ls", "--format", "{{.Name}}"], capture_output=True, text=True
    )
    gateway = "docker_gwbridge" not in networks.stdout.split()  # made by swarm init, kept by leave
    if made:
        subprocess.run(
            ["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"], check=True, capture_output=True
        )
    try:
        yield subprocess.run(
            ["docker", "info", "--format", "{{.Name}}"], capture_output=True, text=True, check=True
        ).stdout.strip()
    finally:
        if made:
            subprocess.run(["docker", "swarm", "leave", "--force"], check=False, capture_output=True)
            if gateway:
                subprocess.run(
                    ["docker", "network", "rm", "docker_gwbridge"], check=False, capture_output=True
                )


def lab(*argv: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *argv], capture_output=True, text=True, timeout=timeout, env=env)


def service_spec(name: str, service: str) -> dict:
    out = subprocess.run(
        ["docker", "service", "inspect", f"{name}_{service}"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]["Spec"]


def test_lab_swarm_run_on_one_node_serves_through_the_proxy_and_leaves_nothing(one_node_swarm, tmp_path):
    name = f"ktor-lab-test-{os.getpid()}-swarm"
    ports = {s: free_port() for s in ("proxy", "nginx", "locust", "prometheus", "grafana")}
    settings = [a for s, p in ports.items() for a in ("--set", f"{compose.HOST_PORTS[s]}={p}")]
    out = tmp_path / "run"
    registry_port = free_port()
    labels_before = {n.id: n.labels for n in swarm.nodes()}
    # No LAB_PASSWORD: lab swarm makes one at the first deploy and keeps it here (not in ~/.config).
    env = {k: v for k, v in os.environ.items() if k != "LAB_PASSWORD"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    try:
        r = lab(
            "swarm", "run", "per-call-cio", "--name", name, "--workers", "2", "--no-build", "--no-grafana",
            "--registry-port", str(registry_port), "--loads", "rate/100/10", "--duration", "6",
            "--windows", "2", "--spare", "0", "--warm-first", "none", "--warmup", "10",
            "--keep", "--out", str(out), *settings, env=env,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        made = re.search(r"user lab, password (\S+) \(made now and shown this once", r.stdout)
        assert made and r.stdout.count(made[1]) == 1, r.stdout
        login = ("lab", made[1])
        assert not [f.name for f in out.iterdir() if made[1] in f.read_text()]
        results = json.loads((out / "results.json").read_text())
        # lab run's pipeline: a warm-up of the one proxy, then its two windows on the warm proxy,
        # each with Locust's workers' load through the proxy and the proxy's count of the same requests
        runs = results["runs"]
        assert [(r["case"], r["repeat"], r["after"]) for r in runs] == [
            ("per-call-cio", 1, "warm-up"),
            ("per-call-cio", 2, "idle"),
        ], runs
        for run in runs:
            assert run["locust"]["failures"] == 0 and run["locust"]["workers"] == 2, run["locust"]
            assert run["locust"]["requests"] >= 100 * 6 * 0.5, run["locust"]
            assert window_counts_agree(run), (run["locust"], run["proxy"], run["window"])
            assert run["proxy"]["cpu_seconds_per_1000_requests"] > 0, run["proxy"]
            assert run["proxy"]["settings"]["case"] == "per-call-cio"
            # Prometheus' figures of the window, through its gate with the login
            assert run["prometheus"]["threads_live_max"] > 0, run["prometheus"]
            # the master and two workers; nginx's connection log stays on its node: not read
            assert len(run["locust"]["cpu_peak_percent"]) == 3, run["locust"]
            assert run["connections"] is None
            assert run["leak"]["threads_after"] is not None, run["leak"]
        # the proxy's task runs on this engine: its JIT is watched, as natively
        assert runs[0]["warmup"]["jvm_visible"] and runs[0]["proxy"]["jit_cpu_seconds_in_window"] is not None
        report = (out / "report.md").read_text()
        assert "backend swarm" in report, report[:2000]
        # one row, nothing to compare it with, said so; the upstream is where the swarm put it
        assert "One row, per-call-cio: nothing here to compare it with" in report, report[:2000]
        assert "nginx on its node of the swarm, reached over the stack's overlay network" in report
        # every part on the one node, two workers, one node-stats task; the node's CPU in the figures
        backend = results["backend"]
        assert backend["kind"] == "swarm" and backend["stack"] == name, backend
        placement = {s: where.split(", ") for s, where in backend["placement"].items()}
        assert set(placement) == set(swarm.SERVICES) - {"grafana"}, placement
        assert {n for where in placement.values() for n in where} == {one_node_swarm}
        assert len(placement["locust-worker"]) == 2 and len(placement["node-stats"]) == 1
        ((hostname, node),) = backend["nodes"].items()
        assert hostname == one_node_swarm and sorted(node["roles"].split(", ")) == sorted(swarm.ROLES)
        assert 0 < node["cpu_busy"] <= 1 and node["memory_available_bytes"] > 0, node
        # the proxy's own CPU is part of its node's
        cores = sum(r["proxy"]["cpu_seconds"] for r in runs) / sum(r["window"]["seconds"] for r in runs)
        assert 0 < cores <= node["cpu_busy"] * os.cpu_count() + 0.5, (cores, node)

        # what a user opens, with the login: Locust's UI, Prometheus (its gate) with every target up
        locust = local_url(ports["locust"])
        ui = requests.get(locust, timeout=5, auth=login)
        assert ui.status_code == 200 and "locust" in ui.text.lower()
        prometheus = local_url(ports["prometheus"])
        jobs = {"proxy", "locust", "nginx", "node"}
        assert wait_until(
            lambda: {x["metric"]["job"] for x in query(prometheus, "up == 1", auth=login)} == jobs, timeout=30
        ), query(prometheus, "up", auth=login)
        nodes = {x["metric"]["node"] for x in query(prometheus, "lab_node_cpus", auth=login)}
        assert nodes == {one_node_swarm}
        # which host each part runs on, as the dashboard shows it, from the node's own engine
        tasks = {
            x["metric"]["service"]: (x["metric"]["node"], float(x["value"][1]))
            for x in query(prometheus, f'lab_node_tasks{{stack="{name}"}}', auth=login)
        }
        assert tasks == {s: (one_node_swarm, len(w)) for s, w in placement.items()}, tasks
        (info,) = query(prometheus, "lab_proxy_info", auth=login)
        assert info["metric"]["case"] == "per-call-cio"
        # every panel of the dashboard has data for the last window, the hosts' row included (as
        # Grafana shows it with the run in its range; a 6 s load is out of a 20 s rate soon after)
        ended = runs[-1]["window"]["end"]
        assert runs[0]["window"]["start"] < ended <= time.time(), runs[-1]["window"]
        absent = grafana.not_exposed(info["metric"])
        values = {"engine": "cio", "lifetime": "per-call"}
        assert not grafana.panels_without_data(
            prometheus, values, "20s", at=ended, absent=absent, swarm=True, auth=login
        )

        # without the login: Locust's UI and API, Prometheus' query API refuse; /metrics stays open
        start = {"user_count": "1", "spawn_rate": "1", "host": "http://proxy:8080"}
        assert requests.post(f"{locust}/swarm", data=start, timeout=5).status_code == 401
        assert requests.get(f"{locust}/lab/stats", timeout=5).status_code == 401
        assert requests.get(f"{locust}/", auth=("lab", "not-it"), timeout=5).status_code == 401
        assert requests.get(f"{locust}/metrics", timeout=5).status_code == 200
        anonymous = requests.get(f"{prometheus}/api/v1/query", params={"query": "up"}, timeout=5)
        assert anonymous.status_code == 401 and "Basic" in anonymous.headers["WWW-Authenticate"]
        assert requests.get(f"{prometheus}/graph", auth=("lab", "not-it"), timeout=5).status_code == 401
        assert requests.get(f"{locust}/lab/proxy-metrics", timeout=5).status_code == 401
        # with it, the proxy's /metrics as the master reads them on the overlay (lab swarm run's edges)
        read = requests.get(f"{locust}/lab/proxy-metrics", auth=login, timeout=35)
        assert read.ok and 'case="per-call-cio"' in read.text, read.text[:300]
        # and a start aimed at another host is refused, in words, and nothing runs
        before = requests.get(f"{locust}/lab/stats", auth=login, timeout=5).json()
        elsewhere = {**start, "host": "http://example.com"}
        refused = requests.post(f"{locust}/swarm", data=elsewhere, auth=login, timeout=5).json()
        assert (
            refused["success"] is False and "http://example.com is not the lab's proxy" in refused["message"]
        )
        time.sleep(1)
        stats = requests.get(f"{locust}/lab/stats", auth=login, timeout=5).json()
        assert stats["state"] != "running" and stats["requests"] == before["requests"], (before, stats)
        # Grafana (no stand-in here: --no-grafana) is deployed with its own login and no anonymous access
        grafana_env = service_spec(name, "grafana")["TaskTemplate"]["ContainerSpec"]["Env"]
        assert {"GF_AUTH_ANONYMOUS_ENABLED=false", "GF_SECURITY_ADMIN_USER=lab"} <= set(grafana_env)
        # the proxy and nginx are not published unless asked for
        for service in ("proxy", "nginx"):
            assert not service_spec(name, service)["EndpointSpec"].get("Ports"), service
        assert not wait_until(lambda: answers(local_url(ports["proxy"])), timeout=1)

        # another case on the running stack, the proxy published (LAB_PUBLISH_PROXY): what answers is
        # the new case, not the old one's tasks, and the login made at the first deploy still works
        r = lab(
            "swarm", "up", "singleton-okhttp", "--name", name, "--workers", "1", "--no-build", "--no-grafana",
            "--registry-port", str(registry_port), *settings, "--set", "LAB_PUBLISH_PROXY=1", env=env,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert made[1] not in r.stdout and "the password shown when" in r.stdout
        proxy = local_url(ports["proxy"])
        assert requests.get(f"{proxy}/health", timeout=5).text == "ok singleton-okhttp\n"
        assert scrape(proxy).label_values("lab_proxy_info", "case") == {"singleton-okhttp"}
        assert requests.get(f"{local_url(ports['nginx'])}/files/tiny.txt", timeout=5).text == "Success!\n"
        assert swarm.placement(name)["locust-worker"] == [one_node_swarm]
        assert requests.get(f"{locust}/lab/stats", auth=login, timeout=5).ok
    finally:
        down = lab("swarm", "down", "--name", name, timeout=180, env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not swarm.leftovers(name)  # the password's secret included
    assert not list((tmp_path / "config").rglob("*.password"))
    # the roles lab swarm gave the node are taken back
    assert {n.id: n.labels for n in swarm.nodes()} == labels_before
    tags = subprocess.run(["docker", "images", "--format", "{{.Repository}}"], capture_output=True, text=True)
    assert not [t for t in tags.stdout.split() if t.startswith(f"127.0.0.1:{registry_port}/")]


def test_lab_swarm_refuses_a_case_it_cannot_run_and_an_unknown_setting(one_node_swarm):
    r = lab("swarm", "up", "per-call-okhttp protocol https")
    assert r.returncode == 2 and "HTTP/1.1 without distance" in r.stderr, r.stderr
    r = lab("swarm", "up", "per-call-okhttp", "--set", "PROXY_PORT=1")
    assert (
        r.returncode == 2 and "--set PROXY_PORT: neither docker-stack.yml nor the build reads it" in r.stderr
    ), r.stderr
