"""The lab as a Docker Swarm stack (docker-stack.yml): nodes and their labels, the images in a
registry every node reaches, `docker stack deploy`, health, placement, and removal.

A stack is named (`ktor-lab` by default); everything Swarm makes for it carries the label
com.docker.stack.namespace=<name>, and `remove` waits until none of it is left. The registry
the lab starts on this machine when given none is one container (and its volume) labelled
ktor-lab.registry, removed with the stack.

Every UI of the stack asks for a login (user lab): its password is the swarm secret
`<name>-password` (labelled ktor-lab.password), made before the deploy from LAB_PASSWORD or at
random, and removed with the stack. A password the lab made is also kept on this machine
(PASSWORD_DIR, mode 0600), since a secret cannot be read back, so that `lab swarm run` and later
deploys of the same stack log in with it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

import lab_guard  # locust/lab_guard.py (pip install -e locust): the password's rule

from ..cases import Case
from ..errors import LabError
from ..paths import REPO
from ..processes import local_url
from . import compose

STACK_FILE = REPO / "docker-stack.yml"
# The proxy's and nginx's published ports, added to the deploy on request (LAB_PUBLISH_PROXY=1).
PUBLISH_FILE = REPO / "docker-stack.publish-proxy.yml"
ROLES = {
    "sut": "the proxy",
    "upstream": "nginx and its exporter",
    "loadgen": "Locust's master and workers",
    "monitor": "Prometheus and Grafana",
}
# The services and the role that places each; node-stats runs on every node.
SERVICES = {
    "nginx": "upstream",
    "nginx-exporter": "upstream",
    "proxy": "sut",
    "locust": "loadgen",
    "locust-worker": "loadgen",
    "node-stats": "",
    "prometheus": "monitor",
    "prometheus-gate": "monitor",
    "grafana": "monitor",
}
# Host ports, published on the node that runs each (mode: host), as in .env; the proxy's and
# nginx's only with PUBLISH_FILE.
HOST_PORTS = {k: v for k, v in compose.HOST_PORTS.items() if k in SERVICES}
# The service whose task publishes another's port: Prometheus' is its gate's (the login).
PUBLISHED_BY = {"prometheus": "prometheus-gate"}
# The login of every UI: the user, the secret's label, where a password the lab made is kept.
USER = "lab"
PASSWORD_LABEL = "ktor-lab.password"
NAMESPACE = "com.docker.stack.namespace"
REGISTRY_LABEL = "ktor-lab.registry"
# On the nodes lab swarm gave their roles (a swarm of one node): `down` takes them back.
MARKER = "lab.labelled-by-lab-swarm"
REGISTRY_PORT = 5000
IMAGES = ("proxy", "locust")


def docker(*argv: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(["docker", *argv], capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise LabError(f"docker {' '.join(argv)} failed: {(r.stderr or r.stdout).strip()}", code=1)
    return r.stdout


def swarm_problem() -> str | None:
    """Why this engine cannot deploy a stack, or None when it is a swarm manager."""
    if problem := compose.engine_problem():
        return problem
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").split()
    if not state or state[0] != "active":
        return (
            "this Docker engine is not in a swarm: `docker swarm init` makes it a one-node swarm "
            "(docs/swarm.md says how to join others)"
        )
    if state[1:] != ["true"]:
        return "this Docker engine is a swarm worker: run lab swarm on a manager node"
    return None


@dataclass
class Node:
    id: str
    hostname: str
    addr: str
    state: str
    labels: dict[str, str] = field(default_factory=dict)
    availability: str = "active"

    def roles(self) -> list[str]:
        return [r for r in ROLES if self.labels.get(f"lab.{r}") == "true"]


def nodes() -> list[Node]:
    ids = docker("node", "ls", "-q").split()
    out = []
    for n in json.loads(docker("node", "inspect", *ids)) if ids else []:
        out.append(
            Node(
                id=n["ID"],
                hostname=n["Description"]["Hostname"],
                addr=n["Status"].get("Addr", ""),
                state=n["Status"]["State"],
                labels=n["Spec"].get("Labels") or {},
                availability=n["Spec"].get("Availability", "active"),
            )
        )
    return out


def unplaced_roles(all_nodes: list[Node]) -> list[str]:
    """The roles no ready node holds: the services of such a role would never start."""
    held = {r for n in all_nodes if n.state == "ready" for r in n.roles()}
    return [r for r in ROLES if r not in held]


def label_nodes(all_nodes: list[Node]) -> list[str]:
    """A swarm of one node whose labels hold no role gets every role; a swarm of several must
    be labelled by its owner (which node runs what is the point of it). Returns what was done."""
    missing = unplaced_roles(all_nodes)
    if not missing:
        return []
    if len(all_nodes) == 1 and not all_nodes[0].roles():
        node = all_nodes[0]
        labels = [f"lab.{r}=true" for r in ROLES] + [f"{MARKER}=true"]
        docker("node", "update", *[a for label in labels for a in ("--label-add", label)], node.id)
        node.labels.update(dict(label.split("=") for label in labels))
        return [f"labelled the only node, {node.hostname}, with every role: {', '.join(ROLES)}"]
    first = missing[0]
    raise LabError(
        f"no ready node has the label lab.{first}=true ({ROLES[first]} run there): "
        f"docker node update --label-add lab.{first}=true NODE (docs/swarm.md)"
    )


def unlabel_nodes() -> list[str]:
    """The roles label_nodes gave (the nodes it marked), taken back; returns the nodes' names."""
    done = []
    for node in nodes():
        if node.labels.get(MARKER) == "true":
            keys = [f"lab.{r}" for r in ROLES if f"lab.{r}" in node.labels] + [MARKER]
            docker("node", "update", *[a for k in keys for a in ("--label-rm", k)], node.id, check=False)
            done.append(node.hostname)
    return done


def image(registry: str, name: str, env: dict[str, str]) -> str:
    """The tag of the lab's image `name` in `registry`: the proxy's by Ktor release, never by case."""
    tag = f"ktor-{env['KTOR_VERSION']}" if name == "proxy" else "local"
    return f"{registry}/ktor-lab/{name}:{tag}"


def local_image(name: str, env: dict[str, str]) -> str:
    """The tag compose gives the lab's image `name` when it builds it."""
    return image("", name, env).removeprefix("/")


def stack_env(case: Case, registry: str, env: dict[str, str], workers: int, grafana: bool) -> dict[str, str]:
    """The variables docker-stack.yml is interpolated with: .env, then the shell, then the case.
    DOCKER_SOCKET, the engine's socket on every node, is DOCKER_HOST's when that is one."""
    host = env.get("DOCKER_HOST", "")
    socket = {"DOCKER_SOCKET": host.removeprefix("unix://")} if host.startswith("unix://") else {}
    return {
        **compose.dotenv(),
        **socket,
        **env,
        "LAB_REGISTRY": registry,
        **case.proxy_env(),
        "LOCUST_WORKERS": str(workers),
        "GRAFANA_REPLICAS": "1" if grafana else "0",
    }


class Registry:
    """A registry on this machine (.env's REGISTRY_IMAGE) at 127.0.0.1:PORT, for a swarm whose
    nodes are this machine; the nodes of a real swarm need one they all reach (--registry)."""

    def __init__(self, stack: str, port: int = REGISTRY_PORT):
        self.name = f"{stack}-registry"
        self.port = port
        self.address = f"127.0.0.1:{port}"

    def start(self) -> None:
        if docker("ps", "-q", "--filter", f"name=^{self.name}$").strip():
            return
        docker("rm", "-f", self.name, check=False)
        docker(
            "run", "-d", "--name", self.name, "--label", f"{REGISTRY_LABEL}={self.name}",
            "-p", f"127.0.0.1:{self.port}:5000", "-v", f"{self.name}:/var/lib/registry",
            "--label", f"{REGISTRY_LABEL}.address={self.address}",
            compose.dotenv()["REGISTRY_IMAGE"],
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{self.address}/v2/", timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise LabError(f"the registry {self.name} did not answer at {self.address} within 30 s", code=1)

    def remove(self) -> None:
        """The registry, its volume, and the tags the lab gave its images for it."""
        address = docker(
            "inspect", "--format", f'{{{{index .Config.Labels "{REGISTRY_LABEL}.address"}}}}', self.name,
            check=False,
        ).strip()  # fmt: skip
        if address:
            prefix = f"{address}/ktor-lab/"
            tags = docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).split()
            if mine := [t for t in tags if t.startswith(prefix)]:
                docker("image", "rm", *mine, check=False)
        docker("rm", "-f", "-v", self.name, check=False)
        docker("volume", "rm", self.name, check=False)


def build_and_push(registry: str, env: dict[str, str], build: bool = True) -> list[str]:
    """The proxy's and Locust's images built as compose builds them, tagged for `registry` and
    pushed there; returns the pushed tags."""
    if build:
        compose.Project(f"ktor-lab-swarm-build-{os.getpid()}", {}, env=env).build()
    pushed = []
    for name in IMAGES:
        local = local_image(name, env)
        remote = image(registry, name, env)
        docker("tag", local, remote)
        try:
            docker("push", remote)
        finally:
            docker("image", "rm", remote, check=False)  # the tag only served the push
        pushed.append(remote)
    return pushed


def deploy_argv(stack: str, publish_proxy: bool = False) -> list[str]:
    # --resolve-image never: the nodes use the tags as they are (the registry's, or images they
    # already have), and a node that cannot reach Docker Hub is not asked to.
    files = ["-c", str(STACK_FILE), *(["-c", str(PUBLISH_FILE)] if publish_proxy else [])]
    return ["docker", "stack", "deploy", "--resolve-image", "never", "--prune", *files, stack]


def publishes_proxy(env: dict[str, str]) -> bool:
    """LAB_PUBLISH_PROXY=1 (or true, yes, on): the proxy and nginx are published too."""
    return env.get("LAB_PUBLISH_PROXY", "").strip().lower() in ("1", "true", "yes", "on")


def deploy(stack: str, env: dict[str, str]) -> None:
    argv = deploy_argv(stack, publishes_proxy(env))
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        raise LabError(f"docker stack deploy failed: {(r.stderr or r.stdout).strip()}", code=1)


def services(stack: str) -> dict[str, tuple[int, int]]:
    """Each service of the stack (short name) with its running and desired task counts."""
    label = f"label={NAMESPACE}={stack}"
    out = docker("service", "ls", "--filter", label, "--format", "{{.Name}} {{.Replicas}}")
    counts = {}
    for line in out.splitlines():
        name, replicas = line.split()[:2]
        running, desired = replicas.split("/")[:2]
        counts[name.removeprefix(f"{stack}_")] = (int(running), int(desired.split()[0]))
    return counts


def wait_healthy(stack: str, timeout: float = 300) -> dict[str, tuple[int, int]]:
    """Until every service runs all its tasks (a task with a healthcheck counts once healthy).
    Raises with the tasks' errors when the time is up."""
    deadline = time.monotonic() + timeout
    counts: dict[str, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        counts = services(stack)
        if counts and all(r == d for r, d in counts.values()):
            return counts
        time.sleep(2)
    waiting = {s: f"{r}/{d}" for s, (r, d) in counts.items() if r != d}
    errors = docker(
        "stack", "ps", stack, "--no-trunc", "--filter", "desired-state=running",
        "--format", "{{.Name}} {{.CurrentState}} {{.Error}}", check=False,
    )  # fmt: skip
    raise LabError(f"stack {stack} not healthy after {timeout:.0f} s: {waiting}; tasks:\n{errors}", code=1)


def placement(stack: str) -> dict[str, list[str]]:
    """Which node each service's running tasks are on (hostnames)."""
    out = docker("stack", "ps", stack, "--filter", "desired-state=running", "--format", "{{.Name}} {{.Node}}")
    where: dict[str, list[str]] = {}
    for line in out.splitlines():
        task, node = line.split()[:2]
        service = task.removeprefix(f"{stack}_").split(".")[0]
        where.setdefault(service, []).append(node)
    return {s: sorted(n) for s, n in sorted(where.items())}


def local_containers(stack: str, service: str | None = None) -> tuple[str, ...]:
    """Full IDs of the stack's containers running on this engine's own node (`service`'s alone
    when given): on a one-node swarm on this machine, what the lab's processes are."""
    label = f"com.docker.swarm.service.name={stack}_{service}" if service else f"{NAMESPACE}={stack}"
    return tuple(docker("ps", "-q", "--no-trunc", "--filter", f"label={label}", check=False).split())


def local_pid(container: str) -> int | None:
    """The host PID of the container's main process: None unless its engine runs on this kernel and
    in this PID namespace (the process's cgroup names the container; an engine in a namespace of its
    own, as runner/tests/hosts.py makes, reports PIDs of that namespace)."""
    pid = docker("inspect", "-f", "{{.State.Pid}}", container, check=False).strip()
    if not pid.isdigit() or int(pid) <= 0:
        return None
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return int(pid) if container in cgroup else None


def leftovers(stack: str, registry: bool = True) -> list[str]:
    """Services, containers, networks, configs and volumes still labelled with the stack's name,
    and the lab's registry and password secret of it, on this engine (a manager): services,
    configs and secrets are the swarm's, containers and volumes this node's only."""
    label = f"label={NAMESPACE}={stack}"
    out = []
    for kind, argv in (
        ("service", ("service", "ls", "-q", "--filter", label)),
        ("container", ("ps", "-aq", "--filter", label)),
        ("network", ("network", "ls", "-q", "--filter", label)),
        ("config", ("config", "ls", "-q", "--filter", label)),
        ("volume", ("volume", "ls", "-q", "--filter", label)),
        *(
            (
                ("registry", ("ps", "-aq", "--filter", f"label={REGISTRY_LABEL}={stack}-registry")),
                ("volume", ("volume", "ls", "-q", "--filter", f"name=^{stack}-registry$")),
                ("secret", ("secret", "ls", "-q", "--filter", f"label={PASSWORD_LABEL}={stack}")),
            )
            if registry
            else ()
        ),
    ):
        out += [f"{kind} {x}" for x in docker(*argv, check=False).split()]
    return out


def remove(stack: str, timeout: float = 60) -> list[str]:
    """The stack, the lab's registry of it and the roles lab swarm gave; what is left after
    `timeout` seconds, as the manager sees it."""
    remove_stack(stack, timeout)
    Registry(stack).remove()
    forget_password(stack)
    unlabel_nodes()
    return leftovers(stack)


def remove_stack(stack: str, timeout: float = 60) -> None:
    """`docker stack rm`, then up to `timeout` seconds until nothing of it is left (Swarm removes
    tasks and networks after the command returns)."""
    docker("stack", "rm", stack, check=False)
    deadline = time.monotonic() + timeout
    while (left := leftovers(stack, registry=False)) and time.monotonic() < deadline:
        # Anonymous volumes of the stack's containers go once the containers have.
        if not any(x.startswith(("service", "container")) for x in left):
            for x in left:
                kind, ident = x.split()
                if kind == "volume":
                    docker("volume", "rm", ident, check=False)
        time.sleep(1)


def url(stack: str, service: str, ports: dict[str, str]) -> str:
    """http://ADDRESS:PORT of `service`'s published port on the node its task (or its gate's)
    runs on (the node's swarm address; 127.0.0.1 for a node that advertises loopback)."""
    port = int(ports[HOST_PORTS[service]])
    where = placement(stack).get(PUBLISHED_BY.get(service, service), [])
    by_name = {n.hostname: n.addr for n in nodes()}
    addr = by_name.get(where[0], "") if where else ""
    return local_url(port) if addr in ("", "0.0.0.0", "127.0.0.1") else f"http://{addr}:{port}"


def secret_name(stack: str) -> str:
    """The swarm secret of the stack's password (docker-stack.yml's LAB_PASSWORD_SECRET)."""
    return f"{stack}-password"


def password_file(stack: str) -> Path:
    """Where a password the lab made for `stack` is kept on this machine (mode 0600)."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "ktor-lab" / f"swarm-{stack}.password"


def check_password(password: str, source: str = "LAB_PASSWORD") -> str:
    """`password` when Locust's guard will take it (locust/lab_guard.py: the same rule), else a
    LabError naming `source`, before anything is deployed."""
    if why := lab_guard.weakness(password):
        raise LabError(f"{source}: {why}")
    return password


@dataclass
class Login:
    """The stack's login: its password, where it came from ("given", "made", "kept"), its secret."""

    stack: str
    password: str
    how: str

    @property
    def secret(self) -> str:
        return secret_name(self.stack)

    @property
    def auth(self) -> tuple[str, str]:
        return (USER, self.password)

    def describe(self) -> str:
        where = f"the swarm secret {self.secret}"
        if self.how == "given":
            return f"user {USER}, the password of LAB_PASSWORD (in {where})"
        if self.how == "made":
            return (
                f"user {USER}, password {self.password} (made now and shown this once; in {where}, "
                f"and for the lab's own calls in {password_file(self.stack)})"
            )
        return f"user {USER}, the password shown when {where} was made (LAB_PASSWORD=... sets another)"


def ensure_password(stack: str, given: str | None) -> Login:
    """The stack's password secret, before a deploy (the stack is not running: a secret in use
    cannot be replaced). LAB_PASSWORD (`given`) replaces it; else the secret made earlier is kept
    when the lab has its copy; else a random password is made and kept. Returns the login."""
    name = secret_name(stack)
    exists = name in docker("secret", "ls", "--format", "{{.Name}}").split()
    kept = password_file(stack)
    if given is not None:
        login = Login(stack, check_password(given), "given")
        kept.unlink(missing_ok=True)
    elif exists and kept.is_file():
        return Login(stack, check_password(kept.read_text(), str(kept)), "kept")
    else:
        login = Login(stack, secrets.token_urlsafe(18), "made")
    if exists:
        docker("secret", "rm", name)
    r = subprocess.run(
        ["docker", "secret", "create", "--label", f"{PASSWORD_LABEL}={stack}", name, "-"],
        input=login.password,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise LabError(f"docker secret create {name} failed: {(r.stderr or r.stdout).strip()}", code=1)
    if login.how == "made":
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.touch(mode=0o600)
        kept.chmod(0o600)
        kept.write_text(login.password)
    return login


def forget_password(stack: str) -> None:
    """The stack's password secret and the lab's copy of it, removed (after the stack)."""
    name = secret_name(stack)
    if name in docker("secret", "ls", "--format", "{{.Name}}", check=False).split():
        docker("secret", "rm", name, check=False)
    password_file(stack).unlink(missing_ok=True)
