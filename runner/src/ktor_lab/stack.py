"""The lab's parts as host processes on loopback: what compose runs, without Docker.

nginx and its exporter, the proxy (one case at a time, restartable), Prometheus, Locust
with its web UI, and Grafana when a `grafana` binary is installed. The config files are
the compose stack's, rendered for loopback ports (see nginx.py, prometheus.py, grafana.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from . import grafana, loadgen, nginx, prometheus, proxy
from .paths import PROXY_JAR, REPO
from .processes import Service, free_port, port_in_use

NJS_MODULE = Path("/usr/share/nginx/modules/ngx_http_js_module.so")


@dataclass
class Ports:
    nginx: int = 18080
    nginx_status: int = 18081
    proxy: int = 18090
    locust: int = 18089
    prometheus: int = 19090
    exporter: int = 19113
    grafana: int = 13000


# Each port of Ports: the part that listens there and the option of `lab` that moves it.
PORT_OWNERS = {
    "nginx": ("nginx", "--nginx-port"),
    "nginx_status": ("nginx's stub_status", "--nginx-status-port"),
    "proxy": ("the proxy", "--proxy-port"),
    "locust": ("Locust's web UI", "--locust-port"),
    "prometheus": ("Prometheus", "--prometheus-port"),
    "exporter": ("the nginx exporter", "--exporter-port"),
    "grafana": ("Grafana", "--grafana-port"),
}


def busy_ports(ports: Ports, parts: tuple[str, ...] | None = None) -> list[str]:
    """One line per port of `parts` (all by default) already in use on 127.0.0.1, naming the
    part and the option that moves it; checked before anything starts."""
    problems = []
    for name in parts or tuple(PORT_OWNERS):
        port = getattr(ports, name)
        if port_in_use(port):
            part, option = PORT_OWNERS[name]
            problems.append(f"port {port} ({part}) is in use: free it, or choose another with {option}")
    return problems


def free_ports() -> Ports:
    """Ports free on 127.0.0.1 right now, for runs that must not clash with a running `lab up`."""
    return Ports(*(free_port() for _ in range(7)))


def grafana_binary() -> str | None:
    return shutil.which("grafana") or shutil.which("grafana-server")


def preflight(need_prometheus: bool = True) -> list[str]:
    """What is missing to run the native stack, each with how to get it."""
    problems = []
    if not Path(nginx.NGINX).exists():
        problems.append("nginx is missing: apt-get install nginx-light libnginx-mod-http-js")
    elif not NJS_MODULE.exists():
        problems.append("njs is missing: apt-get install libnginx-mod-http-js")
    if not shutil.which(proxy.java()):
        problems.append("java is missing: apt-get install openjdk-17-jre-headless")
    if not PROXY_JAR.exists():
        problems.append(f"{PROXY_JAR.relative_to(REPO)} is missing: make build")
    if not Path(loadgen.locust_bin()).exists():
        problems.append("locust is missing from this Python environment: make setup")
    if need_prometheus:
        if not Path(prometheus.PROMETHEUS).exists():
            problems.append("prometheus is missing: apt-get install prometheus")
        if not Path(prometheus.NGINX_EXPORTER).exists():
            problems.append("the nginx exporter is missing: apt-get install prometheus-nginx-exporter")
    return problems


def cannot_start(problems: list[str]) -> bool:
    """Prints the preflight's problems, if any, for the user; true when there were some."""
    if len(problems) == 1:
        print(f"lab: cannot start: {problems[0]}", file=sys.stderr)
    elif problems:
        print("lab: cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
    return bool(problems)


class NativeStack:
    """Starts parts in order and stops all it started (newest first) on `stop()`."""

    def __init__(self, run_dir: Path, ports: Ports, java_opts: list[str], scrape_interval: str = "5s"):
        self.run_dir = run_dir
        self.ports = ports
        self.java_opts = java_opts
        self.scrape_interval = scrape_interval
        self.services: list[Service] = []
        self.proxy: Service | None = None
        self.locust: list[Service] = []

    @property
    def upstream_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.nginx}"

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.proxy}"

    @property
    def locust_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.locust}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def grafana_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.grafana}"

    def start_upstream(self) -> None:
        self.services.append(
            nginx.start(self.run_dir, nginx.NginxPorts(self.ports.nginx, self.ports.nginx_status))
        )
        status = f"http://127.0.0.1:{self.ports.nginx_status}/stub_status"
        self.services.append(prometheus.start_nginx_exporter(self.run_dir, self.ports.exporter, status))

    def start_proxy(self, case: str, **extra_env: str) -> Service:
        """A fresh proxy process for `case` on the proxy port (the previous one is stopped)."""
        self.stop_proxy()
        env = proxy.case_env(case, self.upstream_url, self.ports.proxy, **extra_env)
        self.proxy = proxy.start(self.run_dir, env, self.java_opts)
        return self.proxy

    def stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None

    def start_locust(self, case: str, workers: int = 0, options: list[str] | None = None) -> None:
        """Locust's web UI aimed at the proxy; no run starts until the UI or `LocustWeb.swarm` asks."""
        opts = ["-H", self.proxy_url, "--lab-case", case, *(options or [])]
        self.locust = loadgen.start(self.run_dir, "locust", self.ports.locust, opts, workers)

    def start_prometheus(self) -> None:
        targets = {
            "proxy": f"127.0.0.1:{self.ports.proxy}",
            "locust": f"127.0.0.1:{self.ports.locust}",
            "nginx": f"127.0.0.1:{self.ports.exporter}",
        }
        self.services.append(
            prometheus.start(
                self.run_dir, self.ports.prometheus, targets, scrape_interval=self.scrape_interval
            )
        )

    def start_grafana(self) -> str | None:
        """Grafana with the lab's provisioning; None once started, else why it was not.

        Its admin password is GRAFANA_ADMIN_PASSWORD, else a random one printed here once (as
        grafana/lab-entrypoint.sh does in compose): never admin/admin."""
        binary = grafana_binary()
        if binary is None:
            return "grafana is not installed (the dashboards run in the compose stack)"
        password = os.environ.get("GRAFANA_ADMIN_PASSWORD") or secrets.token_urlsafe(18)
        if not os.environ.get("GRAFANA_ADMIN_PASSWORD"):
            print(f"lab: Grafana admin password, made for this start (user admin): {password}")
        ini = grafana.render(self.run_dir, self.prometheus_url, self.ports.grafana)
        home = next(
            (
                p
                for p in (Path("/usr/share/grafana"), Path(binary).resolve().parents[1])
                if (p / "conf").is_dir()
            ),
            Path("/usr/share/grafana"),
        )
        argv = [binary, "server"] if Path(binary).name == "grafana" else [binary]
        service = Service(
            "grafana",
            [*argv, "--config", str(ini), "--homepath", str(home)],
            self.run_dir / "grafana.log",
            env={"GF_SECURITY_ADMIN_PASSWORD": password},
        )
        self.services.append(service)
        service.wait_http(f"{self.grafana_url}/api/health", timeout=60)
        return None

    def exited(self) -> list[Service]:
        """Processes that have exited (empty while all run)."""
        return [
            s for s in [*self.services, *self.locust, *([self.proxy] if self.proxy else [])] if not s.alive()
        ]

    def stop(self) -> None:
        for s in reversed(self.locust):
            s.stop()
        self.locust = []
        self.stop_proxy()
        for s in reversed(self.services):
            s.stop()
        self.services = []
