"""Where `lab run` finds the parts: host processes (native) or the compose stack; where `lab
swarm` deploys them (a Docker Swarm stack, `SwarmBackend`, not one of `lab run`'s).

A backend checks a plan before anything starts (`check`: a LabError of one line naming what it
cannot do), starts the shared parts once (`open`), a fresh proxy per case (`start_case`), and
tells the measurement where Locust's web API, the proxy's /metrics and Prometheus answer. Each
owns its rules: how a case's dimensions are applied (a jar and a java natively, an image's build
argument in compose). `Backend` holds what they answer alike; what a backend can do beyond one
proxy's windows is a capability it declares (`can`, of `CAPABILITIES`), and `Backend.need` is the
one place that refuses the rest. `BACKENDS` names them for `lab run --backend`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import machine, metrics, versions
from .cases import Case
from .errors import LabError
from .network import Network, read
from .parts import compose, nginx, swarm, toxiproxy
from .parts.faults import FaultServer
from .parts.loadgen import LocustWeb
from .plan import Plan
from .processes import free_port, local_url, wait_until
from .results import NetworkRecord
from .stack import Ports, Proxy, Stack, grafana_binary, missing, require

# What a backend may do beyond lab run's windows on one proxy, each with what a backend that does
# not declare it (`Backend.can`) answers when asked (`Backend.need`: "the compose backend <this>").
CAPABILITIES = {
    # start_case(keep=True): a proxy kept up between its windows, warmed once (`keeps_proxies`)
    "kept proxies": "runs a fresh proxy per window: proxies kept up between windows run natively",
    # start_case(keep=True) with another up: several at once, their windows interleaved
    "several proxies": "runs one proxy at a time: several side by side run natively",
    "another upstream": "forwards its proxy to its own nginx: run this natively",  # start_case(upstream_url)
    "network": "puts no network between its proxy and nginx: run this natively or with --backend compose",
    "nginx alone": "runs lab run's matrices only: the studies run natively",  # open_upstream
    "faults": "has no fault server: lab study faults runs natively",  # fault_server
    "logs": "keeps its parts' logs in its containers (docker logs)",  # run_dir
    "connections": "cannot read nginx's connection log: it stays on nginx's node",  # else None
}


@dataclass
class ProxyHandle:
    """A proxy a backend started: where its /metrics answer, its host PID (None: not visible),
    Prometheus' instance label of it, and the network between it and nginx."""

    url: str
    pid: int | None
    instance: str
    network: Network
    handle: object = None  # the backend's own (natively the Stack's Proxy)


class Backend(ABC):
    """What every backend answers alike; the defaults are the container backends' (one proxy,
    nginx at `nginx:80` on their network), which the native backend overrides."""

    kind: ClassVar[str]
    can: ClassVar[frozenset[str]]  # of CAPABILITIES
    # How often Prometheus scrapes: the measurement waits for the window's last scrape.
    scrape_seconds: int
    workers = 0  # Locust's, the plan's (open)
    auth: tuple[str, str] | None = None  # the login Locust and Prometheus ask for (Swarm's)
    proxy: ProxyHandle | None = None  # the last start_case started, until stop_case

    def need(self, *capabilities: str) -> None:
        """LabError (one line) naming this backend and what to use instead, for the first of
        `capabilities` it does not declare."""
        for c in capabilities:
            if c not in self.can:
                raise LabError(f"the {self.kind} backend {CAPABILITIES[c]}")

    @property
    def keeps_proxies(self) -> bool:
        """Whether a proxy stays up between its windows, warmed once and measured in windows
        interleaved with the others' (natively; Swarm's one); otherwise a fresh one per window."""
        return "kept proxies" in self.can

    @abstractmethod
    def url(self, part: str) -> str:
        """Where `part` (locust, prometheus, nginx...) answers from this process."""

    @property
    def locust_url(self) -> str:
        return self.url("locust")  # Locust's web API

    @property
    def prometheus_url(self) -> str:
        return self.url("prometheus")

    def locust_host(self, proxy: ProxyHandle) -> str:
        """`proxy` as Locust reaches it (on the containers' network: its service)."""
        return "http://proxy:8080"

    def proxy_metrics(self, proxy: ProxyHandle, timeout: float = 30) -> metrics.Samples:
        """`proxy`'s /metrics now; requests.RequestException when it does not answer in `timeout`."""
        return metrics.scrape(proxy.url, timeout)

    @abstractmethod
    def check(self, plan: Plan, machine: bool = True) -> None:
        """LabError (one line) when the plan cannot run here; nothing has started yet. Without
        `machine` (a dry run), only what the plan asks of the backend, not what is installed."""

    @abstractmethod
    def open(self, plan: Plan, out_dir: Path) -> None:
        """The parts every run shares; logs under `out_dir`."""

    def start_case(
        self,
        case: Case,
        env: dict[str, str],
        network: Network,
        keep: bool = False,
        upstream_url: str | None = None,
    ) -> ProxyHandle:
        """A fresh proxy for `case` with the extra variables `env`, `network` between it and nginx
        (Toxiproxy when it is on, nothing otherwise). With `keep`, the proxies started before stay
        up beside it; otherwise it replaces them. `upstream_url`: another upstream than nginx (the
        fault server of `lab study faults`). What the backend cannot do of these: `need`'s error."""
        asked = {
            "kept proxies": keep,
            "several proxies": keep and self.proxy is not None,
            "another upstream": bool(upstream_url),
            "network": network.on,
        }
        self.need(*(c for c, wanted in asked.items() if wanted))
        self.proxy = self.start(case, env, network, keep, upstream_url)
        return self.proxy

    @abstractmethod
    def start(
        self, case: Case, env: dict[str, str], network: Network, keep: bool, upstream_url: str | None
    ) -> ProxyHandle:
        """start_case's proxy, once the backend can start it."""

    def use(self, proxy: ProxyHandle) -> None:  # noqa: B027 (one proxy up: nothing to do)
        """Makes `proxy` the one under load: the network between it and nginx is its own (a
        container's only proxy has had its own since it started)."""

    def scrape(self, *proxies: ProxyHandle) -> None:  # noqa: B027 (one proxy up: nothing to do)
        """Prometheus scrapes `proxies` alone from now on, at its next scrape: the one under load,
        and the one whose window has just ended until its last scrape is in; the idle ones are left
        alone (one proxy up: nothing to leave)."""

    def stop_case(self, proxy: ProxyHandle) -> None:
        """Stops `proxy` (`close` stops every one left); a container's stays until the next one
        replaces it or `close` removes it (Swarm's: for `lab swarm run --keep` and its report)."""
        self.proxy = None

    def network_record(self, network: Network) -> NetworkRecord:
        """What lies between the proxy and nginx now: `network`, and Toxiproxy's toxics as it reports them."""
        return NetworkRecord(via="none")

    def connections(self, since: float, until: float) -> list[nginx.Connection] | None:
        """The new connections nginx logged between `since` and `until` (seconds since the epoch);
        None where its log cannot be read (no "connections": Swarm, it stays on nginx's node)."""
        return None

    @abstractmethod
    def proxy_log(self, proxy: ProxyHandle) -> str | None:
        """What `proxy` has logged since it started (None: it cannot be read)."""

    def container_ids(self) -> tuple[str, ...]:
        """Containers whose processes count as the lab's (machine figures); natively none, every
        part is a child of this process."""
        return ()

    @abstractmethod
    def close(self) -> None:
        """Stops and removes everything `open` and `start_case` started."""

    @abstractmethod
    def describe(self) -> dict:
        """What results.json records of the backend."""

    @abstractmethod
    def urls(self) -> dict[str, str]:
        """Where each part answers, from this machine, as a user opens it: part -> URL and what to
        open there (lab up prints them)."""

    def exited(self) -> str | None:
        """A part that has exited since it started, with the end of its log; None while all run
        (compose's healthchecks and the swarm restart or report a part that stops)."""
        return None

    # --- the studies' parts: natively only ("nginx alone", "faults", "logs"; a backend that
    # declares one has its own member: test_backends.py holds it) ----------------------------------

    def open_upstream(self, out_dir: Path, java_opts: str, with_nginx: bool = True) -> None:
        """Only nginx (or nothing, `with_nginx` off): for the studies whose own clients measure
        transfers, bursts or faults through a proxy (streaming, threads, faults, protocols'
        uploads); their proxies start through start_case as a run's do, with no Locust or
        Prometheus beside them. Logs in `out_dir`."""
        self.need("nginx alone")

    def fault_server(self) -> FaultServer:
        """The lab's misbehaving upstream (parts/faults.py) beside the parts, started once."""
        self.need("faults")

    @property
    def run_dir(self) -> Path:
        """Where the parts' logs go."""
        self.need("logs")

    @property
    def upstream_url(self) -> str:
        """nginx, as the proxies reach it (a transfer straight to it is a study's reference)."""
        return "http://nginx:80"  # on the containers' network (UPSTREAM_URL)


class NativeBackend(Backend):
    """Every part a child process of this one on 127.0.0.1 (stack.Stack), on free ports."""

    kind = "native"
    can = frozenset(CAPABILITIES)
    # Every 2 s (timeout 2 s): an overloaded proxy can take over a second to answer /metrics.
    scrape_seconds = 2  # measure.SCRAPE_S: what lab run's planned time assumes

    def __init__(self, grafana: bool = False, ports: Ports | None = None, scrape_seconds: int = 0):
        """`ports`: the parts' ports (lab up's, which a user gives); by default free ones, so that a
        run never clashes with a `lab up` beside it. `scrape_seconds`: lab up's 5 s, as in compose."""
        self.grafana = grafana
        self.ports = ports
        self.scrape_seconds = scrape_seconds or self.scrape_seconds
        self.stack: Stack | None = None
        self.java_opts = ""
        # The proxy's CPUs and the rest's while a proxy is under load (lab run --cpus; None: anywhere).
        self.cpus: tuple[frozenset[int], frozenset[int]] | None = None

    @property
    def _stack(self) -> Stack:
        assert self.stack is not None, "open() first"
        return self.stack

    def url(self, part: str) -> str:
        return local_url(getattr(self._stack.ports, part))

    def locust_host(self, proxy: ProxyHandle) -> str:
        return proxy.url

    def check(self, plan: Plan, machine: bool = True) -> None:
        if not machine:
            return
        problems = missing(network=any(plan.network_for(c).on for c in plan.cases_to_run()))
        if self.grafana and grafana_binary() is None:
            problems.append("grafana is not installed (--grafana; the dashboards run in the compose stack)")
        require(problems)

    def open(self, plan: Plan, out_dir: Path) -> None:
        """Builds the jars of the plan's releases first (about 30 s each, once), then nginx, its
        exporter, Prometheus, Locust (and Grafana when asked for)."""
        cases = plan.cases_to_run()
        releases = {versions.proxy_release_of(c) for c in cases}
        versions.ensure_jars(sorted(releases, key=lambda r: r.name))
        if any(plan.network_for(c).on for c in plan.cases_to_run()):
            toxiproxy.binary()  # built once, before the first run's clock starts
        self.workers = plan.workers
        self.cpus = machine.cpu_sets(plan.cpus)
        self.open_upstream(out_dir / "logs", plan.java_opts)  # the Stack and nginx
        self._stack.exporter()
        self._stack.prometheus()
        self._stack.locust(plan.cases[0], plan.workers)
        if self.grafana:
            self._stack.grafana()

    def open_upstream(self, out_dir: Path, java_opts: str, with_nginx: bool = True) -> None:
        self.java_opts = java_opts
        self.stack = Stack(out_dir, self.ports or Ports.free(), java_opts.split(), f"{self.scrape_seconds}s")
        if with_nginx:
            self.stack.nginx()

    def fault_server(self) -> FaultServer:
        return self._stack.faults()

    @property
    def run_dir(self) -> Path:
        return self._stack.run_dir

    @property
    def upstream_url(self) -> str:
        return self.url("nginx")

    def start(
        self, case: Case, env: dict[str, str], network: Network, keep: bool, upstream_url: str | None
    ) -> ProxyHandle:
        """The jar of the case's Ktor release, on its JDK (Stack.proxy), through Toxiproxy on
        loopback when `network` is on; with `keep`, on a port of its own."""
        return self._handle(self._stack.proxy(case, upstream_url, network=network, keep=keep, **env), network)

    def _handle(self, started: Proxy, network: Network) -> ProxyHandle:
        instance = started.url.removeprefix("http://")
        return ProxyHandle(started.url, started.service.pid, instance, network, started)

    def use(self, proxy: ProxyHandle) -> None:
        self._stack.toxics = self._stack.network(proxy.network)
        if self.cpus is not None and proxy.handle is not None:
            self._stack.place(proxy.handle, self.cpus)

    def scrape(self, *proxies: ProxyHandle) -> None:
        if len(self._stack.kept) > 1:
            self._stack.scrape_only(*(p.handle for p in proxies if p.handle is not None))

    def stop_case(self, proxy: ProxyHandle) -> None:
        self._stack.stop_proxy(proxy.handle)  # type: ignore[arg-type]

    def network_record(self, network: Network) -> NetworkRecord:
        t = self._stack.toxiproxy
        via = f"toxiproxy {t.version()} (native, built from its Go module)" if network.on and t else "none"
        return NetworkRecord(
            network.rtt_ms,
            network.jitter_ms,
            network.bandwidth_kbps,
            via,
            self._stack.toxics if network.on else {},
        )

    def connections(self, since: float, until: float) -> list[nginx.Connection]:
        return self._stack.connections(since, until)

    def proxy_log(self, proxy: ProxyHandle) -> str | None:
        return proxy.handle.service.own_log() if proxy.handle is not None else None  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.stack is not None:
            self.stack.stop()

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "java_opts": self.java_opts,
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            "ports": vars(self._stack.ports),
            "note": "every part shares this machine's CPUs; no limits per process",
        }

    def urls(self) -> dict[str, str]:
        lab = self._stack
        out = {"Locust": f"{self.locust_url}/  (start a run there; its stats at /metrics)"}
        if self.grafana:
            out["Grafana"] = f"{self.url('grafana')}/  (Lab overview, no login to view)"
        out["Prometheus"] = f"{self.prometheus_url}/"
        if proxies := [p.url for p in [lab.current_proxy, *lab.kept] if p is not None]:
            out["proxy"] = f"{', '.join(proxies)}/  (/metrics, /health)"
        status = self.url("nginx_status")
        out["nginx"] = f"{self.upstream_url}/files/manifest.json  (status {status}/stub_status)"
        if lab.toxiproxy is not None and lab.toxics:
            out["network"] = f"Toxiproxy {lab.toxiproxy.api}/proxies between them"
        return out

    def exited(self) -> str | None:
        if self.stack is None or not (gone := self.stack.exited()):
            return None
        return f"{gone[0].name} exited with {gone[0].proc.returncode}:\n{gone[0].tail()}"

    # --- natively only: what lab verify, bench and bench-locust take beside the Backend ---------

    def endpoints(self) -> dict[str, str]:
        """Each part's base URL from this machine (lab verify checks each): nginx, its status
        listener, its exporter, Locust, Prometheus, Grafana (when started)."""
        parts = ("nginx", "nginx_status", "exporter", "locust", "prometheus")
        return {p: self.url(p) for p in (*parts, *(("grafana",) if self.grafana else ()))}

    def start_reference(self, case: Case, jar: Path, env: dict[str, str]) -> ProxyHandle:
        """Another program in the proxy's place (`jar`: lean-proxy, lab bench's reference) for
        `case`, with its variables `env`, beside the proxies up; stop_case stops it."""
        network = Network(case.rtt_ms)
        return self._handle(self._stack.proxy(case, jar=jar, network=network, keep=True, **env), network)

    def proxy_pass(self) -> tuple[object, str]:
        """nginx proxy_pass to the lab's nginx on a free port (lab bench's reference): a handle
        for stop_reference, and its URL."""
        return self._stack.proxy_pass()

    def stop_reference(self, handle: object) -> None:
        self._stack.stop_service(handle)  # type: ignore[arg-type]

    def start_locust(self, host: str, workers: int, name: str, options: list[str]) -> None:
        """Locust (with `workers`) at `host` with its `options` (lab bench-locust: headless runs
        against nginx), in place of the one up; stop_locust stops it."""
        self._stack.locust(host=host, workers=workers, name=name, options=options)

    def stop_locust(self) -> None:
        self._stack.stop_locust()


class ComposeBackend(Backend):
    """The compose stack as a project of its own (`ktor-lab-run-<pid>`, free host ports), brought
    up per case with that case's overlay; only the services a run needs (Grafana if asked for).
    `close` removes its containers, network and volumes. Its ports on loopback: no login (the
    UIs' login is for a LAN, docs/security.md)."""

    kind = "compose"
    can = frozenset({"network", "connections"})  # one proxy service per project, to its nginx
    scrape_seconds = 5  # prometheus/prometheus.yml, used as is

    def __init__(self, grafana: bool = False, name: str | None = None):
        self.grafana = grafana
        self.name = name or f"ktor-lab-run-{os.getpid()}"
        self.project: compose.Project | None = None
        # The release of a case that names none: the shell's KTOR_VERSION, else .env's.
        self.default_ktor = os.environ.get("KTOR_VERSION") or compose.dotenv()["KTOR_VERSION"]

    @property
    def _project(self) -> compose.Project:
        assert self.project is not None, "open() first"
        return self.project

    def url(self, part: str) -> str:
        return self._project.url(part)

    def check(self, plan: Plan, machine: bool = True) -> None:
        if plan.cpus != "none":
            raise LabError(
                "--cpus with --backend compose: the lab places the proxy on its CPUs natively only; "
                "give --cpus none"
            )
        if plan.dims.get("java") or any(c.java for c in plan.cases):
            raise LabError(
                "--java with --backend compose: the proxy's JDK is its image's; set PROXY_RUN_IMAGE in .env "
                "(e.g. eclipse-temurin:25-jre) instead"
            )
        if bad := sorted(set(plan.proxy_env) - set(compose.PROXY_VARIABLES)):
            raise LabError(
                f"--set {bad[0]}: docker-compose.yml does not pass it to the proxy; "
                f"with --backend compose use one of {', '.join(compose.PROXY_VARIABLES)}"
            )
        try:
            for case in plan.cases_to_run():
                self.release_of(case)
        except ValueError as e:
            raise LabError(str(e)) from None
        if machine and (problem := compose.engine_problem()):
            raise LabError(f"cannot start: {problem} (--backend compose)")

    def open(self, plan: Plan, out_dir: Path) -> None:
        """Removes what killed runs left, builds the images from today's sources (Docker's cache
        makes this quick when nothing changed), the proxy's once per Ktor release of the plan."""
        network = any(plan.network_for(c).on for c in plan.cases_to_run())
        services = (
            *("proxy", "nginx", "locust", "prometheus"),
            *(("grafana",) if self.grafana else ()),
            *(("toxiproxy",) if network else ()),  # its API, to read the toxics back
        )
        self.workers = plan.workers
        self.project = compose.Project(
            self.name, {s: free_port() for s in services}, workers=plan.workers, grafana=self.grafana
        )
        self.project.env["PROXY_JAVA_OPTS"] = plan.java_opts
        if removed := compose.remove_orphans():
            print(f"lab run: removed what killed runs left on the engine: {', '.join(removed)}", flush=True)
        for release in sorted({self.release_of(c) for c in plan.cases_to_run()}):
            self.project.build(KTOR_VERSION=release)

    def release_of(self, case: Case) -> str:
        """The release of the case's image: its own, else KTOR_VERSION's (the shell's or .env's), or
        the engine's last release when that one does not publish it (apache: 3.4.1)."""
        return versions.proxy_release_of(case, versions.release(self.default_ktor)).name

    def start(
        self, case: Case, env: dict[str, str], network: Network, keep: bool, upstream_url: str | None
    ) -> ProxyHandle:
        """The case's overlay up with a fresh proxy, of the image of its Ktor release (a tag per
        release), and compose/network.yml stacked on it when `network` is on (its values in the
        project's environment); the proxy's host PID when it can be seen (the engine on this
        kernel), so the warm-up can watch its JIT as natively."""
        project = self._project
        project.env.update(env)
        project.env.update(network.env())
        release = self.release_of(case)
        # The case's overlay builds an engine the default release lacks on its own variable (.env).
        project.env.update({"KTOR_VERSION": release, compose.release_variable(case.engine): release})
        project.up(case, fresh_proxy=True, network=network.on)
        return ProxyHandle(project.url("proxy"), project.container_pid("proxy"), "proxy:8080", network)

    def network_record(self, network: Network) -> NetworkRecord:
        if not network.on:
            return super().network_record(network)
        image = compose.dotenv()["TOXIPROXY_IMAGE"]
        return NetworkRecord(
            network.rtt_ms,
            network.jitter_ms,
            network.bandwidth_kbps,
            f"{image} (compose/network.yml)",
            read(self._project.url("toxiproxy")),
        )

    def connections(self, since: float, until: float) -> list[nginx.Connection]:
        return nginx.parse_connections(
            self._project.read_file("nginx", compose.CONNECTIONS_LOG), since, until
        )

    def proxy_log(self, proxy: ProxyHandle) -> str | None:
        """The proxy container's log (a fresh container each window: its lines only)."""
        r = self._project.compose(
            self._project.case,
            "logs",
            "--no-color",
            "--no-log-prefix",
            "proxy",
            check=False,
            capture_output=True,
            text=True,
        )
        return r.stdout + r.stderr if r.returncode == 0 else None

    def container_ids(self) -> tuple[str, ...]:
        """The project's containers: their processes count as the lab's, not as other work."""
        return self._project.container_ids()

    def close(self) -> None:
        if self.project is not None:
            self.project.down()

    def describe(self) -> dict:
        keys = (
            "PROXY_CPUS",
            "PROXY_MEMORY",
            "PROXY_JAVA_OPTS",
            "PROXY_NOFILE",
            "NGINX_CPUS",
            "NGINX_MEMORY",
            "CLIENT_MAX_CONNECTIONS",
        )
        env = compose.dotenv()
        return {
            "kind": self.kind,
            "project": self.name,
            "services": self._project.services(),
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            **{k.lower(): self._project.env.get(k, env.get(k)) for k in keys},
        }

    def urls(self) -> dict[str, str]:
        names = {"locust": "Locust", "grafana": "Grafana", "prometheus": "Prometheus"}
        names |= {"proxy": "proxy", "nginx": "nginx"}
        return {names[s]: f"{self.url(s)}/" for s in names if s in self._project.ports}


class SwarmBackend(Backend):
    """docker-stack.yml deployed on a swarm as the stack `name` (`lab swarm up|run`), one case
    at a time: `open` labels the nodes and builds and pushes the images of the plan's release to
    `registry` (one started on this machine when None); `start_case` deploys the case's stack from
    `Case.proxy_env()` and waits until every service is healthy; `close` removes it. Every UI
    asks for a login (`login`), which the measurement's calls give (`auth`).

    `lab swarm run` measures through `measure.run_plan` as `lab run` does, on the stack's one proxy,
    kept up and warmed once. What differs: the proxy's /metrics are read through Locust's master
    (the proxy answers on the overlay only); nginx's connection log stays on its node (no
    connection figures); the JIT is watched only when the proxy's task runs on this machine's
    engine, and the machine's CPU figures are this machine's (each node's are in results.json's
    `backend.nodes`). Not a `lab run --backend`: one case, one JVM, no A/A pair (docs/swarm.md)."""

    kind = "swarm"
    can = frozenset({"kept proxies"})  # one stack, one proxy service: kept up between its windows
    scrape_seconds = 5  # prometheus/swarm.yml

    def __init__(
        self,
        name: str = "ktor-lab",
        registry: str | None = None,
        registry_port: int = swarm.REGISTRY_PORT,
        settings: dict[str, str] | None = None,
        build: bool = True,
        push: bool = True,
        grafana: bool = True,
        timeout: float = 300,
    ):
        """`settings`: docker-stack.yml's variables given by the user (`--set`), over .env and
        the shell's."""
        self.name = name
        self.registry = registry
        self.registry_port = registry_port
        self.settings = settings or {}
        self.build = build
        self.push = push
        self.grafana = grafana
        self.timeout = timeout
        self.login: swarm.Login | None = None
        self.env: dict[str, str] = {}  # what the stack was deployed with
        self.counts: dict[str, tuple[int, int]] = {}  # each service's tasks when it became healthy
        # Called with the case once its stack is healthy (lab swarm prints where each part runs).
        self.deployed: Callable[[Case], None] | None = None

    def url(self, part: str) -> str:
        return swarm.url(self.name, part, self.env)

    @property
    def auth(self) -> tuple[str, str]:
        assert self.login is not None, "open() first"
        return self.login.auth

    def proxy_metrics(self, proxy: ProxyHandle, timeout: float = 30) -> metrics.Samples:
        """Read by Locust's master on the overlay at the moment asked (locust/lab_export.py)."""
        return metrics.Samples(LocustWeb(self.locust_url, self.auth).proxy_metrics(timeout))

    def check(self, plan: Plan, machine: bool = True) -> None:
        if len(plan.proxies()) > 1:
            raise LabError(
                f"the swarm stack runs one proxy, not {len(plan.proxies())}: one case, one JVM, no A/A pair"
            )
        for case in plan.cases_to_run():
            if case.tls or case.rtt_ms or case.java or plan.network_for(case).on:
                raise LabError(
                    f"{case.name}: the swarm stack runs a case over HTTP/1.1 without distance, on its "
                    "image's JDK: set that with --set PROXY_RUN_IMAGE=... (docs/swarm.md)"
                )
            self.release_of(case)
        if not machine:
            return
        if problem := swarm.swarm_problem():
            raise LabError(problem)
        ready = [n for n in swarm.nodes() if n.state == "ready"]
        if len(ready) > 1 and not self.registry:
            raise LabError(
                f"a swarm of {len(ready)} nodes needs --registry HOST:PORT that every node pulls from: "
                "the one lab swarm starts here answers on this machine's loopback only"
            )

    def release_of(self, case: Case) -> str:
        """The release of the proxy's image: the case's own (`singleton-cio ktor 3.5.1`) or
        --set KTOR_VERSION's, never both (the lab's one rule), else the shell's KTOR_VERSION, else
        .env's default or the engine's last release (apache on 3.4.1). LabError when the release
        given does not publish the case's engine."""
        if case.ktor and "KTOR_VERSION" in self.settings:
            raise LabError(
                f"case {case.name!r} names its Ktor release; "
                "give it there or with --set KTOR_VERSION, not both"
            )
        given = case.ktor or self.settings.get("KTOR_VERSION") or os.environ.get("KTOR_VERSION") or ""
        try:
            return versions.proxy_release_of(case.with_dimensions(ktor=given)).name
        except ValueError as e:
            raise LabError(str(e)) from None

    def open(self, plan: Plan, out_dir: Path) -> None:
        """A stack of the same name is removed first (a redeploy keeps old tasks running for a
        while, and they would look healthy); the nodes labelled; the images of the plan's (one)
        case built and pushed; the login's secret made or reused."""
        if swarm.services(self.name):
            print(f"lab swarm: removing the running stack {self.name} first")
            swarm.remove_stack(self.name)
        for line in swarm.label_nodes(swarm.nodes()):
            print(f"lab swarm: {line}")
        self.workers = plan.workers
        (case,) = plan.cases_to_run()
        self.settings = {**self.settings, "KTOR_VERSION": self.release_of(case)}
        base = {**compose.dotenv(), **os.environ, **self.settings}
        if not self.registry:
            local = swarm.Registry(self.name, self.registry_port)
            local.start()
            self.registry = local.address
        if not self.push:
            print(f"lab swarm: images from {self.registry}, as they are there")
        else:
            print(f"lab swarm: images to {self.registry}")
            for tag in swarm.build_and_push(self.registry, base, build=self.build):
                print(f"  pushed {tag}")
        self.login = swarm.ensure_password(self.name, os.environ.get("LAB_PASSWORD"))

    def start(
        self, case: Case, env: dict[str, str], network: Network, keep: bool, upstream_url: str | None
    ) -> ProxyHandle:
        """The stack deployed for `case` (its proxy's variables from `Case.proxy_env()`, `env`
        over .env, the shell and --set) and healthy; the proxy is `proxy:8080` on the overlay, with
        its host PID when its task runs on this machine's engine."""
        assert self.registry is not None and self.login is not None, "open() first"
        base = {**compose.dotenv(), **os.environ, **self.settings, **env}
        self.env = swarm.stack_env(case, self.registry, base, self.workers, grafana=self.grafana)
        self.env["LAB_PASSWORD_SECRET"] = self.login.secret
        swarm.deploy(self.name, self.env)
        print(f"lab swarm: {self.name} deployed ({case.id}); waiting for every service to be healthy")
        self.counts = swarm.wait_healthy(self.name, self.timeout)
        self.wait_ready()
        if self.deployed is not None:
            self.deployed(case)
        published = swarm.publishes_proxy(self.env)
        url = self.url("proxy") if published else "http://proxy:8080"
        pid = next(filter(None, map(swarm.local_pid, swarm.local_containers(self.name, "proxy"))), None)
        return ProxyHandle(url, pid, "proxy:8080", network)

    def wait_ready(self, timeout: float = 60) -> None:
        """Until Locust's workers have joined its master (LabError when they have not in `timeout`),
        and Prometheus has every active node's figures (it finds them by DNS every 5 s; said when not)."""
        web = LocustWeb(self.locust_url, self.auth)
        if not wait_until(lambda: web.stats().workers >= self.workers, timeout=timeout, interval=1):
            have = web.stats().workers
            raise LabError(
                f"only {have} of {self.workers} Locust workers joined the master in {timeout:.0f} s", code=1
            )
        count = len([n for n in swarm.nodes() if n.state == "ready" and n.availability == "active"])

        def seen() -> int:
            return len(metrics.query(self.prometheus_url, "lab_node_cpus", auth=self.auth))

        if not wait_until(lambda: seen() >= count, timeout=timeout, interval=1):
            print(f"lab swarm: Prometheus has {seen()} of {count} nodes' figures; the others' are null")

    def proxy_log(self, proxy: ProxyHandle) -> str | None:
        r = swarm.docker("service", "logs", "--raw", "--no-task-ids", f"{self.name}_proxy", check=False)
        return r or None

    def container_ids(self) -> tuple[str, ...]:
        """The stack's containers on this machine's engine (a one-node swarm: all of them): their
        CPU is the lab's, not other work's. Each node's own figures are in `nodes` (lab swarm run)."""
        return swarm.local_containers(self.name)

    def close(self) -> None:
        """The stack, its secret's password file, the registry lab swarm started, the labels."""
        if left := swarm.remove(self.name):
            raise LabError(f"stack {self.name}: still there after removal: {', '.join(left)}", code=1)

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "stack": self.name,
            "registry": self.registry,
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
        }

    def urls(self) -> dict[str, str]:
        return {"Locust": f"{self.locust_url}/", "Prometheus": f"{self.prometheus_url}/"}


# `lab run --backend NAME`: the kinds of backend, each made with the run's --grafana.
BACKENDS: dict[str, type[NativeBackend] | type[ComposeBackend]] = {
    NativeBackend.kind: NativeBackend,
    ComposeBackend.kind: ComposeBackend,
}


def make(kind: str, grafana: bool = False) -> Backend:
    return BACKENDS[kind](grafana=grafana)
