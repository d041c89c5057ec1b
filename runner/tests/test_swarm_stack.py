"""The swarm stack on a real one-node Docker Swarm: `lab swarm run` and `lab swarm down` as a
user runs them (docs/swarm.md), on the engine the compose suite uses.

When the engine is not in a swarm, the test makes it a one-node swarm (`docker swarm init
--advertise-addr 127.0.0.1`) and leaves the swarm again afterwards; an engine that already is
in one is used as it is, and only the test's own stack (and registry) is removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from conftest import scrape, wait_until
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


def lab(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *argv], capture_output=True, text=True, timeout=timeout)


def test_lab_swarm_run_on_one_node_serves_through_the_proxy_and_leaves_nothing(one_node_swarm, tmp_path):
    name = f"ktor-lab-test-{os.getpid()}-swarm"
    ports = {s: free_port() for s in ("proxy", "nginx", "locust", "prometheus", "grafana")}
    settings = [a for s, p in ports.items() for a in ("--set", f"{compose.HOST_PORTS[s]}={p}")]
    out = tmp_path / "run"
    registry_port = free_port()
    labels_before = {n.id: n.labels for n in swarm.nodes()}
    try:
        r = lab(
            "swarm", "run", "per-call-cio", "--name", name, "--workers", "2", "--no-build", "--no-grafana",
            "--registry-port", str(registry_port), "--users", "10", "--rate", "100", "--seconds", "10",
            "--keep", "--run-dir", str(out), *settings,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        result = json.loads((out / "swarm-run.json").read_text())
        # Locust's workers made the load through the proxy, and the proxy counted the same requests
        assert result["failures"] == 0 and result["workers"] == 2, result
        assert result["requests"] >= 100, result
        assert abs(result["requests"] - result["proxy_upstream_requests"]) <= 0.02 * result["requests"]
        # every part on the one node, two workers, one node-stats task; the node's CPU in the figures
        placement = result["placement"]
        assert set(placement) == set(swarm.SERVICES) - {"grafana"}, placement
        assert {n for where in placement.values() for n in where} == {one_node_swarm}
        assert len(placement["locust-worker"]) == 2 and len(placement["node-stats"]) == 1
        (node,) = result["nodes"]
        assert node["hostname"] == one_node_swarm and sorted(node["roles"]) == sorted(swarm.ROLES)
        assert 0 < node["cpu_busy"] <= 1 and node["memory_available_bytes"] > 0, node
        # the services' own CPU beside the node's: the proxy's cores, and each Locust process's peak
        assert 0 < result["proxy_cpu_cores"] <= node["cpu_busy"] * os.cpu_count() + 0.5, result
        assert len(result["locust_cpu_peak_percent"]) == 3, result  # the master and two workers

        # what a user opens: the proxy, Locust's UI, Prometheus with every target up
        proxy = local_url(ports["proxy"])
        assert requests.get(f"{proxy}/files/tiny.txt", timeout=5).text == "Success!\n"
        assert scrape(proxy).label_values("lab_proxy_info", "case") == {"per-call-cio"}
        ui = requests.get(local_url(ports["locust"]), timeout=5)
        assert ui.status_code == 200 and "locust" in ui.text.lower()
        prometheus = local_url(ports["prometheus"])
        jobs = {"proxy", "locust", "nginx", "node"}
        assert wait_until(
            lambda: {x["metric"]["job"] for x in query(prometheus, "up == 1")} == jobs, timeout=30
        ), query(prometheus, "up")
        nodes = {x["metric"]["node"] for x in query(prometheus, "lab_node_cpus")}
        assert nodes == {one_node_swarm}
        # which host each part runs on, as the dashboard shows it, from the node's own engine
        tasks = {
            x["metric"]["service"]: (x["metric"]["node"], float(x["value"][1]))
            for x in query(prometheus, f'lab_node_tasks{{stack="{name}"}}')
        }
        assert tasks == {s: (one_node_swarm, len(w)) for s, w in placement.items()}, tasks
        # every panel of the dashboard has data, the hosts' row included (the run ended seconds ago)
        absent = grafana.not_exposed(scrape(proxy).labels("lab_proxy_info"))
        values = {"engine": "cio", "lifetime": "per-call"}
        assert not grafana.panels_without_data(prometheus, values, "20s", absent=absent, swarm=True)
        assert requests.get(f"{local_url(ports['nginx'])}/files/tiny.txt", timeout=5).text == "Success!\n"

        # another case on the running stack: what answers is the new case, not the old one's tasks
        r = lab(
            "swarm", "up", "singleton-okhttp", "--name", name, "--workers", "1", "--no-build", "--no-grafana",
            "--registry-port", str(registry_port), *settings,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert requests.get(f"{proxy}/health", timeout=5).text == "ok singleton-okhttp\n"
        assert scrape(proxy).label_values("lab_proxy_info", "case") == {"singleton-okhttp"}
        assert swarm.placement(name)["locust-worker"] == [one_node_swarm]
    finally:
        down = lab("swarm", "down", "--name", name, timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not swarm.leftovers(name)
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
