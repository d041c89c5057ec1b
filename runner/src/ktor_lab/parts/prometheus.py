"""Prometheus natively: prometheus/prometheus.yml with its targets moved to loopback.

Also the nginx exporter (Debian's prometheus-nginx-exporter), which reads nginx's
stub_status as the compose service does.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from pathlib import Path

import requests
import yaml

from ..paths import REPO
from ..processes import Service, local_url

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NGINX_EXPORTER = shutil.which("prometheus-nginx-exporter") or "/usr/bin/prometheus-nginx-exporter"
CONFIG = REPO / "prometheus" / "prometheus.yml"


def write_config(
    run_dir: Path,
    targets: dict[str, str],
    scrape_interval: str | None = None,
    files: dict[str, Path] | None = None,
) -> Path:
    """Writes prometheus.yml into `run_dir` with each job's target replaced by `targets[job]`, or,
    for a job of `files`, by the targets listed in that file (file-based discovery: the lab
    rewrites it as proxies come and go, several at once in `lab run`).

    A job in neither is left out (e.g. no Locust running). Returns the file's path.
    """
    files = files or {}
    config = yaml.safe_load(CONFIG.read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    if unknown := (set(targets) | set(files)) - jobs:
        raise ValueError(
            f"no such job in {CONFIG.name}: {', '.join(sorted(unknown))}; jobs: {', '.join(sorted(jobs))}"
        )
    wanted = set(targets) | set(files)
    config["scrape_configs"] = [job for job in config["scrape_configs"] if job["job_name"] in wanted]
    for job in config["scrape_configs"]:
        name = job["job_name"]
        if name in files:
            del job["static_configs"]
            # Absolute: Prometheus reads a relative path from the config file's folder, not from
            # its working directory (`--out results/x` made it results/x/logs/results/x/logs/...).
            job["file_sd_configs"] = [{"files": [str(files[name].resolve())], "refresh_interval": "5s"}]
        else:
            job["static_configs"] = [{"targets": [targets[name]]}]
    if scrape_interval:
        config["global"]["scrape_interval"] = scrape_interval
        config["global"]["evaluation_interval"] = scrape_interval
        config["global"]["scrape_timeout"] = scrape_interval
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "prometheus.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def write_targets(path: Path, targets: list[str], gate: ScrapeGate | None = None) -> None:
    """A file-based discovery file of `targets` (host:port), replaced whole when it changes; each
    scraped through `gate` when given, under its own `instance`."""
    if gate is None:
        groups = [{"targets": targets}] if targets else []
    else:
        groups = [{"targets": [gate.address], "labels": gate.labels(t)} for t in targets]
    text = json.dumps(groups)
    if path.exists() and path.read_text() == text:
        return  # unchanged: Prometheus' discovery is not woken for nothing
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class _GateHandler(http.server.BaseHTTPRequestHandler):
    """A scrape at ScrapeGate (its server's `gate`): passed on to an opened proxy, or refused."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        try:
            self.pass_on(self.server.gate, self.path.strip("/").removesuffix("/metrics"))  # type: ignore[attr-defined]
        except OSError:
            pass  # Prometheus gave up first (its scrape timeout): the scrape counts as missed

    def pass_on(self, gate: ScrapeGate, target: str) -> None:
        if target not in gate.opened:
            self.send_error(503, "not scraped now: another proxy is under load")
            return
        session, busy = gate.way_to(target)
        if not busy.acquire(blocking=False):
            self.send_error(503, "its scrape before is still waiting for it")
            return
        try:
            # Prometheus' own timeout for the scrape, and the format it asks for (OpenMetrics
            # first), as a direct scrape gets.
            wait = float(self.headers.get("X-Prometheus-Scrape-Timeout-Seconds") or gate.timeout_s)
            accept = {"Accept": self.headers["Accept"]} if self.headers["Accept"] else {}
            r = session.get(f"http://{target}/metrics", headers=accept, timeout=wait)
        except requests.RequestException as e:
            self.send_error(502, type(e).__name__)
            return
        finally:
            busy.release()
        self.send_response(r.status_code)
        self.send_header("Content-Type", r.headers.get("Content-Type", "text/plain"))
        self.send_header("Content-Length", str(len(r.content)))
        self.end_headers()
        self.wfile.write(r.content)

    def log_message(self, *args) -> None:
        pass


class ScrapeGate:
    """Prometheus' way to the proxies of `lab run`: each proxy up is a target of the proxy job at
    this gate (on loopback, a thread of the runner), with its own `instance`; a scrape is passed
    on to the proxies opened (`open_only`) and answered 503 at once for the others, which spend
    nothing on it (their thread gauges cost an idle proxy about 50 ms a scrape). Opening a proxy
    takes effect at its next scrape. A change of the targets file would take Prometheus' discovery
    up to 5 s, then its scrape manager up to 5 s more (each sends its updates at most that often),
    and a window would wait for it."""

    def __init__(self, timeout_s: float = 10.0):
        self.opened: frozenset[str] = frozenset()
        self.timeout_s = timeout_s
        # One connection kept to each proxy, as Prometheus keeps its own, used by one scrape at a
        # time: a scrape of a proxy whose last one is still waiting (Prometheus gave up on it) is
        # answered 503, not stacked on an overloaded proxy.
        self.sessions: dict[str, requests.Session] = {}
        self.busy: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GateHandler)
        self.server.daemon_threads = True
        self.server.gate = self  # type: ignore[attr-defined]
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="scrape-gate", daemon=True)
        self.thread.start()

    def way_to(self, target: str) -> tuple[requests.Session, threading.Lock]:
        """The connection kept to `target`, and the lock its one scrape at a time holds."""
        with self.lock:
            return self.sessions.setdefault(target, requests.Session()), self.busy.setdefault(
                target, threading.Lock()
            )

    def labels(self, target: str) -> dict[str, str]:
        """The target's labels in the discovery file: its own instance, its path at the gate."""
        return {"instance": target, "__metrics_path__": f"/{target}/metrics"}

    def open_only(self, targets: list[str]) -> None:
        self.opened = frozenset(targets)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        for session in self.sessions.values():
            session.close()


def start(
    run_dir: Path,
    port: int,
    targets: dict[str, str],
    scrape_interval: str | None = None,
    files: dict[str, Path] | None = None,
) -> Service:
    """Starts Prometheus on 127.0.0.1:`port` with data in the run folder; waits until it is ready."""
    conf = write_config(run_dir, targets, scrape_interval, files)
    service = Service(
        "prometheus",
        [
            PROMETHEUS,
            f"--config.file={conf}",
            f"--storage.tsdb.path={run_dir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d",
        ],
        run_dir / "prometheus.log",
    )
    service.wait_http(local_url(port, "/-/ready"), timeout=30)
    return service


def start_nginx_exporter(run_dir: Path, port: int, status_url: str) -> Service:
    """The nginx exporter on 127.0.0.1:`port`, reading `status_url` (nginx's stub_status)."""
    service = Service(
        "nginx-exporter",
        [
            NGINX_EXPORTER,
            f"-nginx.scrape-uri={status_url}",
            f"-web.listen-address=127.0.0.1:{port}",
        ],
        run_dir / "nginx-exporter.log",
    )
    service.wait_http(local_url(port, "/metrics"), timeout=15)
    return service
