"""Several Docker engines on this machine, each as a host of its own, for the multi-node swarm test.

Each engine (`dockerd` of the machine's Docker) runs in a network namespace of its own, joined to
the others by a veth pair on one bridge, and in a UTS and mount namespace of its own: its own
host name (what Swarm calls the node), and its own socket at the one path every node's services
see (SOCKET_IN_NODE, as /var/run/docker.sock is on ordinary hosts). Its files are under a folder
of the test's. The bridge's address is the machine's side, where the registry the nodes pull from
is published.

Each engine is also the first process of a PID namespace of its own, so that everything it
starts (containerd, which Docker starts in a session of its own, the shims and the containers)
lives and dies in that namespace: when the engine ends, the kernel ends the rest.

`Hosts.up()` makes all of it; `down()` stops each engine by its PID (SIGTERM: it stops its
containers first; SIGKILL after a minute), waits until its namespace holds no process, removes
the namespaces, the bridge, the firewall rule and the folders, step by step whatever fails, and
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
    if taken := [n for n in run("ip", "netns", "list").stdout.split() if n.startswith("klab-n")]:
        return f"the network namespace {taken[0]} exists already (another run's)"
    return None


@dataclass
class Node:
    name: str
    address: str
    root: Path
    process: subprocess.Popen | None = None  # unshare, which waits for the engine
    engine_pid: int = 0  # the engine's PID here (1 in its own PID namespace)
    pid_namespace: str = ""  # e.g. pid:[4026532871]

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
            run("ip", "netns", "add", node.name)
            self.nodes.append(node)  # from here on, down() removes its namespace
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
        # nsenter execs unshare, which forks the namespace's first process: sh, which execs the engine.
        node.process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{node.name}", "unshare", "-m", "-u", "-p", "--fork",
             "--mount-proc", "--propagation", "private", "sh", "-c", inside],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        children = Path(f"/proc/{node.process.pid}/task/{node.process.pid}/children")
        deadline = time.monotonic() + 10
        while not (pids := children.read_text().split()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pids:
            raise RuntimeError(
                f"{node.name}: unshare started no engine: {(node.root / 'dockerd.log').read_text()}"
            )
        node.engine_pid = int(pids[0])
        node.pid_namespace = os.readlink(f"/proc/{node.engine_pid}/ns/pid")

    def swarm(self) -> None:
        """The first node initialises a swarm, the others join it as workers."""
        manager, *workers = self.nodes
        manager.docker("swarm", "init", "--advertise-addr", manager.address)
        token = manager.docker("swarm", "join-token", "-q", "worker").stdout.strip()
        for node in workers:
            node.docker("swarm", "join", "--token", token, f"{manager.address}:2377")

    def down(self, timeout: float = 60) -> list[str]:
        """Everything up() made, gone, each step whatever the others did; returns what is left."""
        for node in self.nodes:
            _signal(node.engine_pid, signal.SIGTERM)  # the engine stops its containers, then itself
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while _in_namespace(node.pid_namespace) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _in_namespace(node.pid_namespace):
                _signal(node.engine_pid, signal.SIGKILL)  # the kernel then ends the whole namespace
            if node.process:
                try:
                    node.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    _signal(node.process.pid, signal.SIGKILL)
        steps = [lambda n=n: run("ip", "netns", "del", n.name, check=False) for n in self.nodes]
        if "rule" in self.made:
            steps.append(lambda: run("iptables", "-D", *FORWARD_RULE, check=False))
        if "bridge" in self.made:
            steps.append(lambda: run("ip", "link", "del", BRIDGE, check=False))
        if "mountpoint" in self.made:
            steps.append(lambda: Path(SOCKET_IN_NODE).parent.rmdir())
        steps.append(lambda: shutil.rmtree(self.work, ignore_errors=True))
        for step in steps:
            try:
                step()
            except OSError:
                pass  # leftovers() names it
        return self.leftovers()

    def leftovers(self) -> list[str]:
        netns = run("ip", "netns", "list").stdout.split()
        left = [f"namespace {n.name}" for n in self.nodes if n.name in netns]
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            left.append(f"bridge {BRIDGE}")
        if run("iptables", "-C", *FORWARD_RULE, check=False).returncode == 0:
            left.append("firewall rule")
        if "mountpoint" in self.made and Path(SOCKET_IN_NODE).parent.exists():
            left.append(str(Path(SOCKET_IN_NODE).parent))
        for node in self.nodes:
            left += [f"{node.name}'s process {pid}" for pid in _in_namespace(node.pid_namespace)]
            if node.process and node.process.poll() is None:
                left.append(f"{node.name}'s unshare {node.process.pid}")
        if self.work.exists():
            left.append(str(self.work))
        return left


def _signal(pid: int, sig: int) -> None:
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _in_namespace(pid_namespace: str) -> list[int]:
    """The PIDs of the processes in that PID namespace (none for "")."""
    if not pid_namespace:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "pid") == pid_namespace:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
