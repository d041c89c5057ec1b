"""Prometheus natively: prometheus/prometheus.yml with its targets moved to loopback.

Also the nginx exporter (Debian's prometheus-nginx-exporter), which reads nginx's
stub_status as the compose service does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from ..paths import REPO
from ..processes import Service, local_url

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NGINX_EXPORTER = shutil.which("prometheus-nginx-exporter") or "/usr/bin/prometheus-nginx-exporter"
CONFIG = REPO / "prometheus" / "prometheus.yml"


def render(
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


def write_targets(path: Path, targets: list[str]) -> None:
    """A file-based discovery file of `targets` (host:port), replaced whole."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": targets}] if targets else []))
    tmp.replace(path)


def start(
    run_dir: Path,
    port: int,
    targets: dict[str, str],
    scrape_interval: str | None = None,
    files: dict[str, Path] | None = None,
) -> Service:
    """Starts Prometheus on 127.0.0.1:`port` with data in the run folder; waits until it is ready."""
    conf = render(run_dir, targets, scrape_interval, files)
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
