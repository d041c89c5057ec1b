"""The one owner of the lab's running parts: up in order, and every one of them down.

    with Stack(run_dir, ports) as lab:
        lab.nginx(); lab.exporter(); lab.proxy(Case.parse("per-call-cio")); lab.prometheus(); lab.locust(...)

On leaving the block (or `stop()`), everything it started stops, newest first; a part that
died is reported by `exited()`. Every command and study brings its parts up through a Stack:
nginx and its exporter, the proxy (one at a time, restartable with another case), Prometheus,
Locust, Grafana when installed, the fault server, and any other process (`service`). The config
files are the compose stack's, rendered for loopback (parts/).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from . import machine, versions
from .cases import Case
from .errors import LabError
from .machine import java
from .network import Network
from .parts import faults, grafana, loadgen, nginx, prometheus, proxy, toxiproxy
from .paths import PROXY_JAR, REPO
from .processes import Service, free_port, local_url, port_in_use

NJS_MODULE = Path("/usr/share/nginx/modules/ngx_http_js_module.so")


@dataclass
class Ports:
    nginx: int = 18080
    nginx_status: int = 18081
    proxy: int = 18090
    nginx_tls: int = 18443
    locust: int = 18089
    prometheus: int = 19090
    exporter: int = 19113
    grafana: int = 13000

    @classmethod
    def free(cls) -> Ports:
        """Ports free on 127.0.0.1 right now, for runs that must not clash with a running `lab up`."""
        return cls(*(free_port() for _ in fields(cls)))


# Each port of Ports: the part that listens there, the option of `lab` that moves it (its
# variable is LAB_<NAME>_PORT), and the option's help.
PORT_OWNERS = {
    "nginx": ("nginx", "--nginx-port", "nginx load port on 127.0.0.1"),
    "nginx_status": ("nginx's stub_status", "--nginx-status-port", "nginx stub_status port"),
    "proxy": ("the proxy", "--proxy-port", "proxy port on 127.0.0.1"),
    "nginx_tls": ("nginx over TLS", "--nginx-tls-port", "nginx's TLS port on 127.0.0.1 (HTTP/1.1, HTTP/2)"),
    "locust": ("Locust's web UI", "--locust-port", "Locust web UI and its /metrics on 127.0.0.1"),
    "prometheus": ("Prometheus", "--prometheus-port", "Prometheus on 127.0.0.1"),
    "exporter": ("the nginx exporter", "--exporter-port", "nginx exporter on 127.0.0.1"),
    "grafana": ("Grafana", "--grafana-port", "Grafana (if installed) on 127.0.0.1"),
}


def busy_ports(ports: Ports, parts: tuple[str, ...] | None = None) -> list[str]:
    """One line per port of `parts` (all by default) already in use on 127.0.0.1, naming the
    part and the option that moves it; checked before anything starts."""
    problems, owner = [], {}
    for name in parts or tuple(PORT_OWNERS):
        port = getattr(ports, name)
        if port in owner:  # two parts given one port: the second would fail as it starts
            first, (part, option, _) = PORT_OWNERS[owner[port]][0], PORT_OWNERS[name]
            problems.append(f"port {port} is given to both {first} and {part}: choose another with {option}")
            continue
        owner[port] = name
        if port_in_use(port):
            part, option, _ = PORT_OWNERS[name]
            problems.append(f"port {port} ({part}) is in use: free it, or choose another with {option}")
    return problems


def grafana_binary() -> str | None:
    return shutil.which("grafana") or shutil.which("grafana-server")


def missing(prometheus_too: bool = True, nginx_too: bool = True, network: bool = False) -> list[str]:
    """What is missing to run the native parts (and Toxiproxy when `network`), each with how to get it."""
    problems = [why for why in [toxiproxy.missing_reason()] if network and why]
    if nginx_too and not Path(nginx.NGINX).exists():
        problems.append("nginx is missing: apt-get install nginx-light libnginx-mod-http-js")
    elif nginx_too and not NJS_MODULE.exists():
        problems.append("njs is missing: apt-get install libnginx-mod-http-js")
    if not shutil.which(java()):
        problems.append("java is missing: apt-get install openjdk-17-jre-headless")
    if not PROXY_JAR.exists() and not shutil.which("mvn"):  # the jars are built on first use, by Maven
        problems.append(f"{PROXY_JAR.relative_to(REPO)} is missing and Maven is not installed: make build")
    if not Path(loadgen.locust_bin()).exists():
        problems.append("locust is missing from this Python environment: make setup")
    if prometheus_too:
        if not Path(prometheus.PROMETHEUS).exists():
            problems.append("prometheus is missing: apt-get install prometheus")
        if not Path(prometheus.NGINX_EXPORTER).exists():
            problems.append("the nginx exporter is missing: apt-get install prometheus-nginx-exporter")
    return problems


def require(problems: list[str]) -> None:
    """LabError (exit 2) listing `problems` (from `missing`, `busy_ports`...), if there are any."""
    if len(problems) == 1:
        raise LabError(f"cannot start: {problems[0]}")
    if problems:
        raise LabError("cannot start:\n  " + "\n  ".join(problems))


@dataclass
class Proxy:
    """A running proxy: its case, where it answers, its process."""

    case: Case
    url: str
    service: Service


class Stack:
    """Starts parts in order and stops all it started (newest first) on `stop()` or leaving `with`."""

    def __init__(
        self,
        run_dir: Path,
        ports: Ports | None = None,
        java_opts: list[str] | None = None,
        scrape_interval: str = "5s",
    ):
        self.run_dir = run_dir
        self.ports = ports or Ports.free()
        self.java_opts = java_opts if java_opts is not None else ["-Xmx512m"]
        self.scrape_interval = scrape_interval
        self.services: list[Service] = []
        self.current_proxy: Proxy | None = None
        # Proxies kept up beside each other (`proxy(keep=True)`: lab run's warm proxies).
        self.kept: list[Proxy] = []
        # Prometheus finds the proxies in this file, rewritten as they come and go.
        self.proxy_targets = run_dir / "proxy-targets.json"
        # The proxies Prometheus scrapes alone (empty: every proxy up).
        self.scraped: tuple[Proxy, ...] = ()
        # Made by the first scrape_only: Prometheus reaches every proxy through it from then on.
        self.gate: prometheus.ScrapeGate | None = None
        self.locust_services: list[Service] = []
        self.toxiproxy: toxiproxy.Toxiproxy | None = None
        # The toxics Toxiproxy reported when the current proxy's network was set ({}: none).
        self.toxics: dict[str, list[dict]] = {}

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *_) -> None:
        self.stop()

    # --- where the parts answer ------------------------------------------------------------

    @property
    def upstream_url(self) -> str:
        return local_url(self.ports.nginx)

    @property
    def upstream_tls_url(self) -> str:
        """nginx's TLS port, by the address its certificate names (127.0.0.1)."""
        return f"https://127.0.0.1:{self.ports.nginx_tls}"

    def upstream_for(self, case: Case, network: Network | None = None) -> dict[str, str]:
        """The proxy's upstream variables for `case`'s protocol: nginx over http, or over TLS
        trusting the lab CA only (`https`, `h2`; CLIENT_HTTP_VERSION comes with the case); through
        Toxiproxy's proxy of the same kind when `network` is on (its TLS proxy listens on
        127.0.0.1, a name of nginx's certificate, and passes TLS through untouched)."""
        through = self.toxiproxy if network is not None and network.on else None
        if case.protocol == "http":
            return {"UPSTREAM_URL": through.url("nginx") if through else self.upstream_url}
        url = through.url("nginx-tls", "https") if through else self.upstream_tls_url
        return {"UPSTREAM_URL": url, "UPSTREAM_CA_FILE": str(nginx.CA_FILE)}

    def network(self, network: Network) -> dict[str, list[dict]]:
        """Toxiproxy between the proxy and nginx (started on first use, after nginx) made
        `network`'s; returns its toxics as it reports them. An off network leaves it out of
        the path (`upstream_for`) and removes its toxics."""
        if self.toxiproxy is None:
            if not network.on:
                return {}
            self.toxiproxy = toxiproxy.start(
                self.run_dir, {"http": self.ports.nginx, "tls": self.ports.nginx_tls}
            )
            self.services.append(self.toxiproxy.service)
        toxics = self.toxiproxy.set(network)
        return toxics if network.on else {}

    def connections(self, since: float, until: float) -> list[nginx.Connection]:
        """New connections to nginx between `since` and `until`, as it logged them."""
        return nginx.connections(self.run_dir, since, until)

    @property
    def status_url(self) -> str:
        return local_url(self.ports.nginx_status)

    @property
    def proxy_url(self) -> str:
        return local_url(self.ports.proxy)

    @property
    def locust_url(self) -> str:
        return local_url(self.ports.locust)

    @property
    def prometheus_url(self) -> str:
        return local_url(self.ports.prometheus)

    @property
    def grafana_url(self) -> str:
        return local_url(self.ports.grafana)

    # --- the parts ---------------------------------------------------------------------------

    def service(self, name: str, argv: list[str], ready_url: str | None = None, **env: str) -> Service:
        """Any other process, watched and stopped like the parts; waits for `ready_url` if given."""
        s = Service(name, argv, self.run_dir / f"{name}.log", env=env or None)
        self.services.append(s)
        if ready_url:
            s.wait_http(ready_url, timeout=60)
        return s

    def stop_service(self, s: Service) -> None:
        s.stop()
        if s in self.services:
            self.services.remove(s)

    def nginx(self) -> Service:
        """The upstream, with the lab's static files (generated once per checkout)."""
        ports = nginx.NginxPorts(self.ports.nginx, self.ports.nginx_status, self.ports.nginx_tls)
        s = nginx.start(self.run_dir, ports)
        self.services.append(s)
        return s

    def exporter(self) -> Service:
        s = prometheus.start_nginx_exporter(
            self.run_dir, self.ports.exporter, f"{self.status_url}/stub_status"
        )
        self.services.append(s)
        return s

    def proxy(
        self,
        case: Case,
        upstream_url: str | None = None,
        port: int | None = None,
        jar: Path | None = None,
        java: str | None = None,
        network: Network | None = None,
        keep: bool = False,
        **settings: str,
    ) -> Proxy:
        """A fresh proxy process for `case` (the previous one is stopped), on the proxy port unless
        `port` is given, forwarding to nginx unless `upstream_url` is; `settings` are its variables.
        It runs the jar of the case's Ktor release (built first when missing or older than its
        sources) on the case's JDK, the defaults when it names none; `jar` runs another program
        instead (LEAN_PROXY_JAR: the minimal reference proxy), `java` another JDK's java. Between it
        and nginx, `network` (default: the case's round trip, nothing else): Toxiproxy when it is
        on, and the proxy is told its values (lab_network_info). With `keep`, the others stay up
        and it listens on a free port (`stop_proxy` ends the current one, `stop` all of them)."""
        if jar is None:  # the default release too: a jar older than its sources is rebuilt, not run
            jar, case_java = versions.program(case)
            java = java or case_java
        elif java is None and case.java:
            java = versions.jdk(case.java).java
        if not keep:
            self.stop_proxy()
        port = port or (free_port() if keep else self.ports.proxy)
        if upstream_url:
            upstream = {"UPSTREAM_URL": upstream_url}
        else:
            network = network if network is not None else Network(case.rtt_ms)
            self.toxics = self.network(network)
            upstream = {**self.upstream_for(case, network), **(network.env() if network.on else {})}
        env = proxy.case_env(case, upstream.pop("UPSTREAM_URL"), port, **upstream, **settings)
        service = proxy.start(self.run_dir, env, self.java_opts, jar=jar or PROXY_JAR, java_bin=java)
        started = Proxy(case, local_url(port), service)
        if keep:
            self.kept.append(started)
        else:
            self.current_proxy = started
        self.write_proxy_targets()
        return started

    def scrape_only(self, *which: Proxy) -> None:
        """Prometheus scrapes `which` alone from now on (none named: every proxy up), through the
        gate (`prometheus.ScrapeGate`): at its next scrape, not after its discovery's delay."""
        self.scraped = which
        if self.gate is None:
            self.gate = prometheus.ScrapeGate()
        self.write_proxy_targets()

    def stop_proxy(self, which: Proxy | None = None) -> None:
        """Stops `which` (default: the current proxy)."""
        which = which or self.current_proxy
        if which is None:
            return
        which.service.stop()
        if which is self.current_proxy:
            self.current_proxy = None
        if which in self.kept:
            self.kept.remove(which)
        self.write_proxy_targets()

    def write_proxy_targets(self) -> None:
        """The proxies up now for Prometheus (its proxy job reads them from `proxy_targets`); once
        `scrape_only` has named some, through the gate, which passes on their scrapes alone: a
        scrape costs an idle proxy about 50 ms of CPU (its thread gauges), which lab run's idle
        proxies must not spend during another's window."""
        up = [*([self.current_proxy] if self.current_proxy else []), *self.kept]
        if self.gate is not None:  # every proxy up is a target; the gate passes on the chosen
            chosen = [p for p in up if p in self.scraped] or up
            self.gate.open_only([p.url.removeprefix("http://") for p in chosen])
        if self.run_dir.exists():
            prometheus.write_targets(
                self.proxy_targets, [p.url.removeprefix("http://") for p in up], self.gate
            )

    def proxy_pass(self) -> tuple[Service, str]:
        """nginx `proxy_pass` to the lab's nginx (`lab bench`'s reference) on a free port: the
        process (`stop_service` ends it) and its URL."""
        port = free_port()
        s = nginx.start_proxy_pass(self.run_dir, self.ports.nginx, port)
        self.services.append(s)
        return s, local_url(port)

    def prometheus(self, targets: dict[str, str] | None = None) -> Service:
        """Prometheus scraping the proxies up (however many: `proxy_targets`), Locust and the
        exporter (or `targets`, job to host:port)."""
        files = {} if targets else {"proxy": self.proxy_targets}
        targets = targets or {
            "locust": f"127.0.0.1:{self.ports.locust}",
            "nginx": f"127.0.0.1:{self.ports.exporter}",
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.write_proxy_targets()
        s = prometheus.start(
            self.run_dir, self.ports.prometheus, targets, scrape_interval=self.scrape_interval, files=files
        )
        self.services.append(s)
        return s

    def locust(
        self,
        case: Case | None = None,
        workers: int = 0,
        options: list[str] | None = None,
        host: str | None = None,
        sweep: bool = False,
        name: str = "locust",
    ) -> list[Service]:
        """Locust's web UI (and its export) aimed at the proxy, or `host`; no run starts until the UI,
        `LocustWeb.swarm` or an --autostart in `options` asks. One at a time (the previous stops)."""
        self.stop_locust()
        opts = ["-H", host or self.proxy_url, *(["--lab-case", case.id] if case else []), *(options or [])]
        self.locust_services = loadgen.start(self.run_dir, name, self.ports.locust, opts, workers, sweep)
        return self.locust_services

    def stop_locust(self) -> None:
        for s in reversed(self.locust_services):
            s.stop()
        self.locust_services = []

    def faults(self) -> faults.FaultServer:
        """The lab's fault server on the nginx port (it stands in for the upstream)."""
        self.services.append(faults.start(self.run_dir, self.ports.nginx))
        return faults.FaultServer(self.upstream_url)

    def grafana(self) -> str | None:
        """Grafana with the lab's provisioning; None once started, else why it was not.

        Its admin password is GRAFANA_ADMIN_PASSWORD, else a random one printed here once (as
        grafana/lab-entrypoint.sh does in compose): never admin/admin."""
        binary = grafana_binary()
        if binary is None:
            return "grafana is not installed (the dashboards run in the compose stack)"
        password = os.environ.get("GRAFANA_ADMIN_PASSWORD") or secrets.token_urlsafe(18)
        if not os.environ.get("GRAFANA_ADMIN_PASSWORD"):
            print(
                f"lab: Grafana admin password, made for this start (user admin): {password}", file=sys.stderr
            )
        ini = grafana.write_provisioning(self.run_dir, self.prometheus_url, self.ports.grafana)
        home = next(
            (
                p
                for p in (Path("/usr/share/grafana"), Path(binary).resolve().parents[1])
                if (p / "conf").is_dir()
            ),
            Path("/usr/share/grafana"),
        )
        argv = [binary, "server"] if Path(binary).name == "grafana" else [binary]
        self.service(
            "grafana",
            [*argv, "--config", str(ini), "--homepath", str(home)],
            f"{self.grafana_url}/api/health",
            GF_SECURITY_ADMIN_PASSWORD=password,
        )
        return None

    # --- all of them ---------------------------------------------------------------------------

    def place(self, proxy: Proxy, cpus: tuple[frozenset[int], frozenset[int]]) -> None:
        """`proxy` (the one under load) on the first CPUs of `cpus`, every other part up (nginx,
        Prometheus, Locust and its workers, Toxiproxy, the idle proxies) on the second: lab run
        --cpus."""
        mine, rest = cpus
        others = [*self.services, *self.locust_services, *(p.service for p in self.kept)]
        if self.current_proxy is not None:
            others.append(self.current_proxy.service)
        for service in others:
            if service is not proxy.service and service.alive():
                machine.pin(service.pid, rest)
        machine.pin(proxy.service.pid, mine)

    def exited(self) -> list[Service]:
        """Processes that have exited (empty while all run)."""
        running = [
            *self.services,
            *self.locust_services,
            *([self.current_proxy.service] if self.current_proxy else []),
            *(p.service for p in self.kept),
        ]
        return [s for s in running if not s.alive()]

    def stop(self) -> None:
        self.stop_locust()
        self.stop_proxy()
        for kept in reversed(self.kept):
            self.stop_proxy(kept)
        try:
            for s in reversed(self.services):
                s.stop()
            self.services = []
        finally:
            if self.gate is not None:
                self.gate.close()
                self.gate = None
