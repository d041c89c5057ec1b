"""The compose stack: its files, its effective configuration, and a running project of it.

`merged_config` runs tools/compose-config (compose-go, the loader `docker compose` uses) on the
repository's docker-compose.yml and overlays, and returns what `docker compose config`
would: every service with its overlays merged, variables interpolated, paths resolved.

`Project` runs the stack on a Docker engine as one compose project with a name and host
ports of its own, so it never touches a lab a user has up, and removes everything it made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import yaml
from dotenv import dotenv_values

from .. import versions
from ..cases import DIMENSIONS, ENGINE_TITLES, LIFETIME_TITLES, Case
from ..errors import LabError
from ..paths import REPO
from ..processes import free_port, local_url, wait_until

BASE = REPO / "docker-compose.yml"
OVERLAYS = REPO / "compose"
TOOL_DIR = REPO / "tools" / "compose-config"
TOOL = TOOL_DIR / "compose-config"
FETCH_GO = REPO / "tools" / "fetch-go.py"
# What a failed image build shows of its output: the failing step and Maven's summary of its tests.
BUILD_TAIL_LINES = 60


class ComposeError(RuntimeError):
    """The files do not load: the message is compose-go's."""


def dotenv(path: Path = REPO / ".env") -> dict[str, str]:
    """The repository's .env as compose reads it (quotes, comments and escapes as python-dotenv,
    which follows the same format, parses them)."""
    return {k: v or "" for k, v in dotenv_values(path).items()}


# The overlays that are not a case, each stacked on a case's: what each changes.
EXTRA_OVERLAYS = {
    "distributed": "a Locust master and workers",
    "headless": "one Locust run without the UI, its results in results/",
    "https": "the proxy calls nginx over TLS (CLIENT_HTTP_VERSION=2 for HTTP/2)",
    "network": "Toxiproxy between the proxy and nginx (UPSTREAM_RTT_MS, _JITTER_MS, _BANDWIDTH_KBPS)",
    "lan": "the UIs on LAB_BIND, a network address, each asking for a login (LAB_PASSWORD, user lab)",
}


def overlay(name: str) -> Path:
    """compose/<name>.yml: a case (`per-call-okhttp`) or an extra (EXTRA_OVERLAYS)."""
    return OVERLAYS / f"{name}.yml"


def release_variable(engine: str) -> str:
    """The variable of .env that names the release an engine the default release lacks is built
    on (APACHE_KTOR_VERSION=3.4.1): its overlays build the proxy's image with it."""
    return f"{engine.upper()}_KTOR_VERSION"


def overlay_text(case: Case) -> str:
    """What compose/<case>.yml holds: its first lines say what it changes, then only the delta,
    the proxy's environment for the case (Case.proxy_env) and Locust's label of it; for an engine
    the default release does not publish, the release its image is built on."""
    proxy: dict = {"environment": case.base.proxy_env()}
    note = versions.note(case.base)
    if note:
        variable = f"${{{release_variable(case.engine)}:?set in .env}}"
        proxy = {
            "build": {"args": {"KTOR_VERSION": variable}},
            "image": f"ktor-lab/proxy:ktor-{variable}",
            **proxy,
        }
        note = (
            f"# {note}. Its image is built on {release_variable(case.engine)} (.env): KTOR_VERSION's "
            f"{versions.default_release().name} does not publish it.\n"
        )
    delta = {"services": {"proxy": proxy, "locust": {"environment": {"LAB_CASE": case.id}}}}
    return (
        f"# {case.id}: the proxy forwards through {ENGINE_TITLES[case.engine]}, "
        f"{LIFETIME_TITLES[case.lifetime]}.\n"
        + (note or "")
        + f"# docker compose -f docker-compose.yml -f compose/{case.id}.yml up\n"
        + yaml.safe_dump(delta, sort_keys=False)
    )


def go() -> str | None:
    """Go 1.24+: the one on PATH, else the lab's pinned release (tools/fetch-go.py downloads it
    once into the cache); None when neither can be had (the script has said why on stderr)."""
    found = subprocess.run([sys.executable, str(FETCH_GO)], stdout=subprocess.PIPE, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def tool() -> Path:
    """The compose-config binary, built with Go when missing or older than its sources."""
    sources = [TOOL_DIR / "main.go", TOOL_DIR / "go.mod", TOOL_DIR / "go.sum"]
    if not TOOL.exists() or TOOL.stat().st_mtime < max(s.stat().st_mtime for s in sources):
        if (go_binary := go()) is None:
            raise ComposeError("Go is needed to build tools/compose-config: install Go 1.24 or later")
        subprocess.run([go_binary, "build", "-o", str(TOOL), "."], cwd=TOOL_DIR, check=True)
    return TOOL


def merged_config(*overlays: str, env: dict[str, str] | None = None, inherit_env: bool = True) -> dict:
    """The effective config of docker-compose.yml plus compose/<overlay>.yml for each name, in order.

    `env` adds to (or, with `inherit_env=False`, replaces) the process environment that
    interpolation reads beside .env.
    """
    argv = [str(tool()), "-f", str(BASE)]
    for name in overlays:
        argv += ["-f", str(overlay(name))]
    base_env = dict(os.environ) if inherit_env else {"PATH": os.environ.get("PATH", "")}
    r = subprocess.run(argv, capture_output=True, text=True, env={**base_env, **(env or {})})
    if r.returncode != 0:
        raise ComposeError(r.stderr.strip())
    return json.loads(r.stdout)


# What docker-compose.yml passes to the proxy from the shell or .env: every variable of
# ProxyConfig.kt but the case's (its overlay's), where the stack has nginx and the proxy's own
# address (UPSTREAM_URL, HOST, PORT), and those of the https and network overlays; plus the
# container's JVM options and open-files limit. Tests keep it equal to the file
# (tests/unit/test_compose_variables.py, tests/test_compose.py).
PROXY_VARIABLES = (
    "CLIENT_MAX_CONNECTIONS",
    "CLIENT_LIMITS",
    "CLIENT_CONNECT_TIMEOUT_MS",
    "CLIENT_REQUEST_TIMEOUT_MS",
    "CLIENT_RETRY_ON_STALE",
    "CLIENT_PIPELINING",
    "CLIENT_DISPATCHER",
    "SERVER_HEADER_TIMEOUT_MS",
    "SERVER_IDLE_TIMEOUT_MS",
    "ACCESS_LOG",
    "PROXY_JAVA_OPTS",
    "PROXY_NOFILE",
)
# nginx's log of new connections in its container (LAB_LOG_DIR in docker-compose.yml).
CONNECTIONS_LOG = "/var/log/nginx/lab/connections.log"
# What a run needs; Grafana only when asked for (it has no stand-in on the build machine).
SERVICES = ("nginx", "nginx-exporter", "proxy", "locust", "prometheus")
# The published ports of .env, by service.
HOST_PORTS = {
    "proxy": "PROXY_HOST_PORT",
    "nginx": "NGINX_HOST_PORT",
    "locust": "LOCUST_HOST_PORT",
    "prometheus": "PROMETHEUS_HOST_PORT",
    "grafana": "GRAFANA_HOST_PORT",
    "toxiproxy": "TOXIPROXY_HOST_PORT",  # its API (compose/network.yml)
}


def engine_problem() -> str | None:
    """Why `docker compose` cannot run here, or None when a Docker engine and the plugin answer."""
    if shutil.which("docker") is None:
        return "docker is missing: install Docker with the compose plugin"
    r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if r.returncode != 0:
        return "`docker compose` does not work here: install the compose plugin (docker-compose-plugin)"
    r = subprocess.run(["docker", "version"], capture_output=True, text=True)
    if r.returncode != 0:
        host = os.environ.get("DOCKER_HOST", "the default socket")
        return f"no Docker engine answers at {host}: start one (or export DOCKER_HOST)"
    return None


class Project:
    """One compose project of the lab: `docker compose -p NAME -f docker-compose.yml -f compose/CASE.yml`.

    `ports` maps services to the host ports to publish them on (127.0.0.1, as .env's LAB_BIND);
    `env` adds variables (PROXY_NOFILE=..., LOCUST_RUN_TIME=...) to what compose interpolates.
    """

    def __init__(
        self,
        name: str,
        ports: dict[str, int],
        env: dict[str, str] | None = None,
        workers: int = 0,
        grafana: bool = False,
    ):
        self.name = name
        self.ports = ports
        self.workers = workers
        self.grafana = grafana
        # compose/network.yml stacked on the case's overlay (Toxiproxy between the proxy and nginx).
        self.network = False
        self.case_network = False
        self.env = {
            **os.environ,
            **{HOST_PORTS[s]: str(p) for s, p in ports.items()},
            # nginx's TLS port too, so that two projects (or a project beside `lab up`) never clash
            "NGINX_TLS_HOST_PORT": str(free_port()),
            "LOCUST_WORKERS": str(workers or 2),
            **(env or {}),
        }
        self.case: Case | None = None
        # The variables a case's dimensions set, with what they were before (None: unset): the
        # next case puts them back, so a --set of the same variable holds for cases at the default.
        self.case_vars: dict[str, str | None] = {}

    def url(self, service: str) -> str:
        return local_url(self.ports[service])

    def services(self) -> list[str]:
        return [
            *SERVICES,
            *(["locust-worker"] if self.workers else []),
            *(["grafana"] if self.grafana else []),
            *(["toxiproxy"] if self.network else []),
        ]

    def argv(self, case: Case | None, *command: str, extras: tuple[str, ...] = ()) -> list[str]:
        """`docker compose` for the project: the base, the case's overlay (none: the base's own
        case, enough for what acts on the project as a whole), and the extras."""
        files = ["-f", str(BASE), *(["-f", str(overlay(case.id))] if case else [])]
        tls = ("https",) if case and case.tls else ()
        network = ("network",) if self.network else ()
        for extra in (*(("distributed",) if self.workers else ()), *tls, *network, *extras):
            files += ["-f", str(overlay(extra))]
        return ["docker", "compose", "-p", self.name, *files, *command]

    def compose(
        self,
        case: Case | None,
        *command: str,
        extras: tuple[str, ...] = (),
        check: bool = True,
        **kwargs,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(case, *command, extras=extras), env=self.env, check=check, **kwargs)

    def apply_case_env(self, case: Case) -> None:
        """The case's other proxy variables (HTTP/2, the dispatcher, the pool limit), which
        docker-compose.yml and its overlays interpolate, in the project's environment; those the
        last case set are put back first (a --set of the same variable holds at the default)."""
        for name, before in self.case_vars.items():
            if before is None:
                self.env.pop(name, None)
            else:
                self.env[name] = before
        env = case.proxy_env()
        names = {name for d in DIMENSIONS for name, _ in d.variables if name in env}
        self.case_vars = {name: self.env.get(name) for name in names}
        self.env.update({name: env[name] for name in names})

    def up(self, case: Case, fresh_proxy: bool = False, timeout: int = 300, network: bool = False) -> None:
        """The stack with `case`'s overlay, every service healthy. Switching cases recreates only
        the proxy and Locust; `fresh_proxy` recreates the proxy even when its case is unchanged.
        `network` stacks compose/network.yml (its values: UPSTREAM_* in `env`)."""
        # The release and JDK are the image's (KTOR_VERSION, PROXY_RUN_IMAGE); the protocol is the
        # https overlay and, for h2, CLIENT_HTTP_VERSION (which compose/https.yml passes on); the
        # round trip is the network overlay's, with the project's UPSTREAM_RTT_MS.
        case = case.with_dimensions(ktor="", java="", rtt_ms=0)
        self.apply_case_env(case)
        # Without the overlay, Toxiproxy stays up unused (an orphan of the project, removed by down()).
        self.network = network
        same = (case, network) == (self.case, self.case_network)
        up = ("up", "-d", "--wait", "--wait-timeout", str(timeout))
        self.compose(case, *up, *self.services(), stdout=subprocess.DEVNULL)
        if fresh_proxy and same:
            self.compose(case, *up, "--no-deps", "--force-recreate", "proxy", stdout=subprocess.DEVNULL)
        self.case, self.case_network = case, network

    def build(self, **env: str) -> None:
        """The images compose builds (the proxy, Locust), from the repository's Dockerfiles;
        `env` sets variables for this build only (KTOR_VERSION=3.5.1)."""
        # Plain progress, kept: a failing step (Maven's tests in the proxy's image) says why only there.
        argv = self.argv(None, "build", "--progress=plain", "proxy", "locust")
        r = subprocess.run(argv, env={**self.env, **env}, capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-BUILD_TAIL_LINES:])
            command = " ".join(argv)
            raise LabError(
                f"docker compose build failed (exit {r.returncode}; {command}); its last lines:\n{tail}"
            )

    def container_pid(self, service: str) -> int | None:
        """The host PID of the service's main process, when the engine runs on this kernel."""
        r = self.compose(self.case, "ps", "-q", service, check=False, capture_output=True, text=True)
        ids = r.stdout.split()
        if not ids:
            return None
        pid = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Pid}}", ids[0]], capture_output=True, text=True
        ).stdout.strip()
        return int(pid) if pid.isdigit() and int(pid) > 0 and psutil.pid_exists(int(pid)) else None

    def read_file(self, service: str, path: str) -> str:
        """A file in the service's container ("" when it is not there)."""
        r = self.compose(
            self.case, "exec", "-T", service, "cat", path, check=False, capture_output=True, text=True
        )
        return r.stdout if r.returncode == 0 else ""

    def container_ids(self) -> tuple[str, ...]:
        """Full IDs of the project's containers (their cgroups name them)."""
        r = subprocess.run(
            ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={self.name}"],
            capture_output=True,
            text=True,
            env=self.env,
        )
        return tuple(r.stdout.split())

    def down(self) -> None:
        """Stops and removes every container, network and volume of the project."""
        self.compose(
            self.case,
            "down",
            "--volumes",
            "--remove-orphans",
            "--timeout",
            "10",
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.case = None

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes still labelled with the project's name."""
        label = f"label=com.docker.compose.project={self.name}"
        out = []
        for kind, argv in (
            ("container", ["docker", "ps", "-aq", "--filter", label]),
            ("network", ["docker", "network", "ls", "-q", "--filter", label]),
            ("volume", ["docker", "volume", "ls", "-q", "--filter", label]),
        ):
            r = subprocess.run(argv, capture_output=True, text=True)
            out += [f"{kind} {x}" for x in r.stdout.split()]
        return out


def wait_gone(project: Project, timeout: float = 30) -> list[str]:
    """Leftovers of `project` once they have had `timeout` seconds to go."""
    gone = wait_until(lambda: not project.leftovers(), timeout, interval=1)
    return [] if gone else project.leftovers()


# Projects the lab names after the process that owns them: `lab run --backend compose`
# (ktor-lab-run-<pid>) and the test suite (ktor-lab-test-<pid>-<name>).
OWNED = re.compile(r"ktor-lab-(?:run|test)-(\d+)(?:-[\w-]+)?")


def orphaned_projects() -> list[str]:
    """The lab's own projects whose owning process is gone: what a run killed with SIGKILL (or a
    machine that stopped under it) left behind. Projects of live processes are never listed."""
    names = set()
    for argv in (
        ["docker", "ps", "-a", "--format", '{{.Label "com.docker.compose.project"}}'],
        ["docker", "network", "ls", "--format", '{{.Label "com.docker.compose.project"}}'],
        ["docker", "volume", "ls", "--format", '{{.Label "com.docker.compose.project"}}'],
    ):
        names |= set(subprocess.run(argv, capture_output=True, text=True).stdout.split())
    return sorted(n for n in names if (m := OWNED.fullmatch(n)) and not _alive(int(m[1])))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans() -> list[str]:
    """Removes what orphaned_projects lists (containers, networks, volumes); returns their names."""
    orphans = orphaned_projects()
    for name in orphans:
        Project(name, {}).down()
    return orphans
