"""Several Docker engines on this machine, each as a host of its own, for the multi-node swarm test.

Each engine (`dockerd` of the machine's Docker) runs in a network namespace of its own, joined to
the others by a veth pair on one bridge, and in a UTS and mount namespace of its own: its own
host name (what Swarm calls the node), and its own socket at the one path every node's services
see (SOCKET_IN_NODE, as /var/run/docker.sock is on ordinary hosts). Its files are under a folder
of the test's. The bridge's address is the machine's side, where the registry the nodes pull from
is published.

`Hosts.up()` makes all of it; `down()` stops the engines by their process groups (each engine's
containerd with it), removes the namespaces, the bridge, the firewall rule and the folders, and
says what it could not remove. Only what `up()` made is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"
BRIDGE = "klab-br0"
SOCKET_IN_NODE = "/run/klab-self/docker.sock"
# This machine's firewall drops forwarded packets by default, and bridged ones pass through it.
FORWARD_RULE = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def problem() -> str | None:
    """Why the engines cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter", "unshare", "iptables", "dockerd"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        return f"the bridge {BRIDGE} exists already (another run's, or the machine's)"
    if f"{SUBNET}." in run("ip", "-4", "addr").stdout:
        return f"{SUBNET}.0/24 is in use on this machine"
    return None


@dataclass
class Node:
    name: str
    address: str
    root: Path
    process: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.root / "sock" / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["docker", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_HOST": self.docker_host},
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"{self.name}: docker {' '.join(argv)}: {r.stderr.strip()}")
        return r


@dataclass
class Hosts:
    """`count` engines named klab-n1... at 10.77.0.11..., pulling from `insecure_registry`."""

    count: int
    work: Path
    insecure_registry: str
    nodes: list[Node] = field(default_factory=list)
    made: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.1"

    def up(self, timeout: float = 60) -> None:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.made.append("bridge")
        run("ip", "addr", "add", f"{self.gateway}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        run("iptables", "-I", *FORWARD_RULE)
        self.made.append("rule")
        if not Path(SOCKET_IN_NODE).parent.exists():
            Path(SOCKET_IN_NODE).parent.mkdir()  # empty on the machine; each node mounts its own on it
            self.made.append("mountpoint")
        for i in range(1, self.count + 1):
            node = Node(f"klab-n{i}", f"{SUBNET}.{10 + i}", self.work / f"n{i}")
            self.nodes.append(node)
            self._namespace(node, i)
            self._engine(node)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while node.docker("version", check=False).returncode != 0:
                if node.process.poll() is not None or time.monotonic() > deadline:
                    log = (node.root / "dockerd.log").read_text()[-2000:]
                    raise RuntimeError(f"{node.name}'s engine did not start: {log}")
                time.sleep(0.5)

    def _namespace(self, node: Node, i: int) -> None:
        run("ip", "netns", "add", node.name)
        run("ip", "link", "add", f"klab-v{i}", "type", "veth", "peer", "name", "eth0", "netns", node.name)
        run("ip", "link", "set", f"klab-v{i}", "master", BRIDGE, "up")
        for argv in (
            ("addr", "add", f"{node.address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
            ("route", "add", "default", "via", self.gateway),
        ):
            run("ip", "-n", node.name, *argv)

    def _engine(self, node: Node) -> None:
        (node.root / "sock").mkdir(parents=True)
        inside = (
            f"hostname {node.name} "
            f"&& mount --bind {node.root / 'sock'} {Path(SOCKET_IN_NODE).parent} "
            f"&& exec dockerd --data-root {node.root / 'data'} --exec-root {node.root / 'exec'} "
            f"--pidfile {node.root / 'dockerd.pid'} -H unix://{SOCKET_IN_NODE} "
            f"--insecure-registry {self.insecure_registry}"
        )
        log = (node.root / "dockerd.log").open("w")
        # nsenter, unshare and sh each exec the next: the engine is the session's leader, and its
        # containerd is in its process group.
        node.process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{node.name}", "unshare", "-m", "-u", "--propagation", "private",
             "sh", "-c", inside],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def swarm(self) -> None:
        """The first node initialises a swarm, the others join it as workers."""
        manager, *workers = self.nodes
        manager.docker("swarm", "init", "--advertise-addr", manager.address)
        token = manager.docker("swarm", "join-token", "-q", "worker").stdout.strip()
        for node in workers:
            node.docker("swarm", "join", "--token", token, f"{manager.address}:2377")

    def down(self, timeout: float = 60) -> list[str]:
        """Everything up() made, gone; returns what is still there."""
        for node in self.nodes:
            if node.process and node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=10)
            # its containerd and shims are in its group: wait until none is left
            while _group_alive(node.process.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _group_alive(node.process.pid):
                os.killpg(node.process.pid, signal.SIGKILL)
        # what an engine's containerd started in sessions of their own (shims), found by its folder
        for pid in _processes_under(self.work):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for node in self.nodes:
            run("ip", "netns", "del", node.name, check=False)
        if "mountpoint" in self.made:
            Path(SOCKET_IN_NODE).parent.rmdir()
        if "rule" in self.made:
            run("iptables", "-D", *FORWARD_RULE, check=False)
        if "bridge" in self.made:
            run("ip", "link", "del", BRIDGE, check=False)
        shutil.rmtree(self.work, ignore_errors=True)
        return self.leftovers()

    def leftovers(self) -> list[str]:
        left = [
            f"namespace {n.name}" for n in self.nodes if n.name in run("ip", "netns", "list").stdout.split()
        ]
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            left.append(f"bridge {BRIDGE}")
        if run("iptables", "-C", *FORWARD_RULE, check=False).returncode == 0:
            left.append("firewall rule")
        left += [f"engine {n.name}" for n in self.nodes if n.process and _group_alive(n.process.pid)]
        left += [f"process {pid}" for pid in _processes_under(self.work)]
        if self.work.exists():
            left.append(str(self.work))
        return left


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_under(folder: Path) -> list[int]:
    """PIDs of the processes whose command line names `folder` (an engine's, its containerd's, shims')."""
    needle = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
