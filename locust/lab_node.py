"""The CPU and memory of the host this runs on, for Prometheus: one task per swarm node.

docker-stack.yml runs it as the global service `node-stats` (in the lab's Locust image, which has
Python and prometheus_client) with the host's /proc mounted at /host/proc, so that a busy
generator node or a busy node under test shows beside the services' own figures. Its series
carry the node's name (LAB_NODE, Swarm's {{.Node.Hostname}}):

  lab_node_cpu_seconds_total{node,mode}   the host's CPU time by mode (/proc/stat), all cores
  lab_node_cpus{node}                     cores online
  lab_node_memory_bytes{node,kind}        total and available memory (/proc/meminfo)
  lab_node_load1{node}                    the 1-minute load average
  lab_node_tasks{node,stack,service}      the swarm services' containers running on this node,
                                          from the node's Docker engine (LAB_DOCKER_SOCKET, when
                                          mounted): which host each part runs on
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
from pathlib import Path

from prometheus_client import start_http_server
from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily

MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
USER_HZ = os.sysconf("SC_CLK_TCK")
STACK_LABEL = "com.docker.stack.namespace"


class DockerSocket(http.client.HTTPConnection):
    """HTTP to a Docker engine's API over its unix socket."""

    def __init__(self, path: str):
        super().__init__("localhost", timeout=3)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(3)
        self.sock.connect(self.path)


def running_tasks(docker_socket: str) -> dict[tuple[str, str], int]:
    """(stack, service) -> containers of it running on this engine; {} when the engine does not answer."""
    filters = urllib.parse.quote(json.dumps({"label": [STACK_LABEL], "status": ["running"]}))
    conn = DockerSocket(docker_socket)
    try:
        conn.request("GET", f"/containers/json?filters={filters}")
        response = conn.getresponse()
        containers = json.loads(response.read()) if response.status == 200 else []
    except (OSError, http.client.HTTPException, ValueError):
        return {}  # the host's own figures are still given
    finally:
        conn.close()
    counts: dict[tuple[str, str], int] = {}
    for c in containers:
        stack = c["Labels"][STACK_LABEL]
        service = c["Labels"].get("com.docker.swarm.service.name", "").removeprefix(f"{stack}_")
        counts[stack, service] = counts.get((stack, service), 0) + 1
    return counts


class HostCollector:
    def __init__(self, proc: Path, node: str, docker_socket: str = ""):
        self.proc, self.node, self.docker_socket = proc, node, docker_socket

    def collect(self):
        lines = (self.proc / "stat").read_text().splitlines()
        ticks = lines[0].split()[1 : 1 + len(MODES)]
        cpu = CounterMetricFamily("lab_node_cpu_seconds", "Host CPU time by mode", labels=["node", "mode"])
        for mode, value in zip(MODES, ticks, strict=False):
            cpu.add_metric([self.node, mode], int(value) / USER_HZ)
        yield cpu
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        yield _one("lab_node_cpus", "Cores online", self.node, cores)
        meminfo = {}
        for line in (self.proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) * 1024
        memory = GaugeMetricFamily("lab_node_memory_bytes", "Host memory", labels=["node", "kind"])
        memory.add_metric([self.node, "total"], meminfo["MemTotal"])
        memory.add_metric([self.node, "available"], meminfo["MemAvailable"])
        yield memory
        load1 = float((self.proc / "loadavg").read_text().split()[0])
        yield _one("lab_node_load1", "Host load average over 1 minute", self.node, load1)
        if self.docker_socket:
            tasks = GaugeMetricFamily(
                "lab_node_tasks",
                "Containers of swarm services on this node",
                labels=["node", "stack", "service"],
            )
            for (stack, service), count in sorted(running_tasks(self.docker_socket).items()):
                tasks.add_metric([self.node, stack, service], count)
            yield tasks


def _one(name: str, doc: str, node: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["node"])
    g.add_metric([node], value)
    return g


def main() -> int:
    proc = Path(os.environ.get("LAB_HOST_PROC", "/host/proc"))
    if not (proc / "stat").exists():
        print(f"lab_node: {proc}/stat is missing: mount the host's /proc there", file=sys.stderr)
        return 2
    node = os.environ.get("LAB_NODE") or os.uname().nodename
    port = int(os.environ.get("LAB_NODE_PORT", "9100"))
    docker_socket = os.environ.get("LAB_DOCKER_SOCKET", "")
    if docker_socket and not Path(docker_socket).exists():
        docker_socket = ""
    REGISTRY.register(HostCollector(proc, node, docker_socket))
    start_http_server(port)
    print(f"lab_node: {node}'s CPU and memory at :{port}/metrics", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
