"""The swarm stack across hosts: four Docker engines on this machine, each in network, UTS and
mount namespaces of its own (runner/tests/hosts.py), joined into one swarm. The proxy, nginx and
the load generator run on different nodes, Locust's workers on two, and `lab swarm run` drives
them from the manager as a user would on real machines (docs/swarm.md).

The nodes pull every image from a registry on the compose suite's engine, published on the
bridge that joins them: the official images' stand-ins and the lab's two, as a user without
Docker Hub would mirror them.
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

from conftest import wait_until, window_counts_agree
from hosts import SOCKET_IN_NODE, Hosts
from hosts import problem as hosts_problem
from ktor_lab.metrics import query
from ktor_lab.parts import compose, swarm
from ktor_lab.processes import free_port

pytestmark = pytest.mark.compose

LAB = str(Path(sys.executable).with_name("lab"))
ROLES = {
    "klab-n1": ("sut",),
    "klab-n2": ("upstream",),
    "klab-n3": ("loadgen", "monitor"),
    "klab-n4": ("loadgen",),
}
IMAGES = ("NGINX_IMAGE", "NGINX_EXPORTER_IMAGE", "PROMETHEUS_IMAGE")


def docker(*argv: str) -> subprocess.CompletedProcess:
    """The compose suite's engine (the machine's side of the bridge)."""
    return subprocess.run(["docker", *argv], capture_output=True, text=True)


@pytest.fixture(scope="module")
def four_hosts(compose_engine, tmp_path_factory) -> Iterator[tuple[Hosts, str]]:
    """Four engines in one swarm, labelled by ROLES; yields them and the registry they pull from."""
    if why := hosts_problem():
        if os.environ.get("LAB_COMPOSE_REQUIRED"):
            pytest.fail(f"several hosts cannot be made here: {why}")
        pytest.skip(f"several hosts cannot be made here: {why}")
    port = free_port()
    hosts = Hosts(len(ROLES), tmp_path_factory.mktemp("hosts"), insecure_registry=f"10.77.0.1:{port}")
    registry = f"ktor-lab-test-{os.getpid()}-hosts-registry"
    pushed: list[str] = []
    try:
        hosts.up()
        hosts.swarm()
        manager = hosts.nodes[0]
        for node, roles in ROLES.items():
            manager.docker(
                "node", "update", *[a for r in roles for a in ("--label-add", f"lab.{r}=true")], node
            )
        # one registry, two doors: loopback for this engine's pushes, the bridge for the nodes
        image = compose.dotenv()["REGISTRY_IMAGE"]
        r = docker(
            "run",
            "-d",
            "--name",
            registry,
            "-p",
            f"127.0.0.1:{port}:5000",
            "-p",
            f"{hosts.insecure_registry}:5000",
            image,
        )
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: docker("exec", registry, "true").returncode == 0, timeout=30)
        env = compose.dotenv()
        local = [env[v] for v in IMAGES] + [swarm.local_image(name, env) for name in swarm.IMAGES]
        for tag in local:
            pushed.append(f"127.0.0.1:{port}/{tag}")
            assert docker("tag", tag, pushed[-1]).returncode == 0
            assert wait_until(lambda t=pushed[-1]: docker("push", t).returncode == 0, timeout=120)
        yield hosts, hosts.insecure_registry
    finally:
        docker("rm", "-f", "-v", registry)
        if pushed:
            docker("image", "rm", *pushed)
        left = hosts.down()
        assert not left, f"left behind: {left}"


def test_the_stack_runs_with_its_parts_on_different_hosts(four_hosts, tmp_path):
    hosts, registry = four_hosts
    manager = hosts.nodes[0]
    # the login, given (LAB_PASSWORD): every UI asks for it from outside the swarm
    login = ("lab", f"hosts-login-{os.getpid()}")
    env = {**os.environ, "DOCKER_HOST": manager.docker_host, "LAB_PASSWORD": login[1]}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    dotenv = compose.dotenv()
    images = [a for v in IMAGES for a in ("--set", f"{v}={registry}/{dotenv[v]}")]
    out = tmp_path / "run"
    try:
        r = subprocess.run(
            [LAB, "swarm", "run", "per-call-cio", "--registry", registry, "--no-push", "--no-grafana",
             "--workers", "2", "--loads", "rate/100/10", "--duration", "6", "--windows", "1", "--spare", "0",
             "--warm-first", "none", "--warmup", "0", "--keep",
             "--out", str(out), "--set", f"DOCKER_SOCKET={SOCKET_IN_NODE}", *images],
            capture_output=True, text=True, env=env, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        results = json.loads((out / "results.json").read_text())
        (run,) = results["runs"]  # one window, through the proxy's node, read by Locust's master
        assert run["locust"]["failures"] == 0 and run["locust"]["workers"] == 2, run["locust"]
        assert run["locust"]["requests"] >= 100, run["locust"]
        assert window_counts_agree(run), (run["locust"], run["proxy"], run["window"])
        # the proxy runs in another PID namespace (its node's): its JIT is not watched from here
        assert run["warmup"]["jvm_visible"] is False
        # each part where its role put it; the workers spread over both loadgen nodes
        placement = {s: where.split(", ") for s, where in results["backend"]["placement"].items()}
        assert placement["proxy"] == ["klab-n1"]
        assert placement["nginx"] == placement["nginx-exporter"] == ["klab-n2"]
        assert placement["prometheus"] == placement["prometheus-gate"] == ["klab-n3"]
        assert placement["locust"] in (["klab-n3"], ["klab-n4"])  # either loadgen node
        assert placement["locust-worker"] == ["klab-n3", "klab-n4"]
        assert placement["node-stats"] == sorted(ROLES)
        nodes = results["backend"]["nodes"]
        assert {h: tuple(n["roles"].split(", ")) for h, n in nodes.items()} == ROLES
        assert all(0 < n["cpu_busy"] <= 1 for n in nodes.values()), nodes

        # from outside the swarm, at each node's own address: Locust's UI and Prometheus (its gate) on
        # n3, with the login only; the proxy on n1 is not published
        address = {n.name: n.address for n in hosts.nodes}
        ports = {k: dotenv[v] for k, v in compose.HOST_PORTS.items() if v in dotenv}
        proxy = f"http://{address['klab-n1']}:{ports['proxy']}"
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{proxy}/files/tiny.txt", timeout=5)
        locust = f"http://{address[placement['locust'][0]]}:{ports['locust']}"
        assert requests.get(f"{locust}/", timeout=5).status_code == 401
        assert requests.get(f"{locust}/", timeout=5, auth=login).status_code == 200
        prometheus = f"http://{address['klab-n3']}:{ports['prometheus']}"
        assert (
            requests.get(f"{prometheus}/api/v1/query", params={"query": "up"}, timeout=5).status_code == 401
        )
        assert wait_until(
            lambda: len(query(prometheus, 'up{job="node"} == 1', auth=login)) == len(ROLES), timeout=30
        )
        assert {x["metric"]["job"] for x in query(prometheus, "up == 1", auth=login)} == {
            "proxy",
            "locust",
            "nginx",
            "node",
        }
        # each node's engine tells where each part runs, as docker does
        tasks: dict[str, list[str]] = {}
        for x in query(prometheus, "lab_node_tasks", auth=login):
            tasks.setdefault(x["metric"]["service"], []).extend(
                [x["metric"]["node"]] * int(float(x["value"][1]))
            )
        assert {s: sorted(n) for s, n in tasks.items()} == placement
    finally:
        down = subprocess.run([LAB, "swarm", "down"], capture_output=True, text=True, env=env, timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
