"""Where `lab run` finds the parts: host processes (native) or the compose stack.

A backend starts the shared parts once (`open`), a fresh proxy per run (`start_case`),
and tells the matrix where Locust's web API, the proxy's /metrics and Prometheus answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import compose
from .stack import NativeStack, Ports


class NativeBackend:
    # Every 2 s (timeout 2 s): an overloaded proxy can take over a second to answer /metrics.
    scrape_seconds = 2

    def __init__(self, run_dir: Path, ports: Ports, java_opts: str, workers: int, first_case: str):
        self.stack = NativeStack(run_dir, ports, java_opts.split(), scrape_interval=f"{self.scrape_seconds}s")
        self.java_opts = java_opts
        self.workers = workers
        self.first_case = first_case

    @property
    def locust_url(self) -> str:
        return self.stack.locust_url

    @property
    def locust_host(self) -> str:
        return self.stack.proxy_url

    @property
    def proxy_metrics_url(self) -> str:
        return self.stack.proxy_url

    @property
    def prometheus_url(self) -> str:
        return self.stack.prometheus_url

    def open(self) -> None:
        self.stack.start_upstream()
        self.stack.start_prometheus()
        self.stack.start_locust(self.first_case, self.workers)

    def start_case(self, case: str, env: dict[str, str]) -> int | None:
        return self.stack.start_proxy(case, **env).pid

    def close(self) -> None:
        self.stack.stop()

    def describe(self) -> dict:
        p = self.stack.ports
        return {
            "kind": "native",
            "java_opts": self.java_opts,
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            "ports": vars(p),
            "note": "every part shares this machine's CPUs; no limits per process",
        }


class ComposeBackend:
    """The compose stack, brought up per case with that case's overlay (`up --wait`)."""

    scrape_seconds = 5

    def __init__(self, workers: int):
        self.workers = workers
        env = compose.dotenv()
        self.ports = {k: env[k] for k in env if k.endswith("_HOST_PORT")}
        self.env = env

    @property
    def locust_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['LOCUST_HOST_PORT']}"

    locust_host = "http://proxy:8080"

    @property
    def proxy_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['PROXY_HOST_PORT']}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['PROMETHEUS_HOST_PORT']}"

    def argv(self, case: str, *command: str) -> list[str]:
        files = ["-f", str(compose.BASE), "-f", str(compose.overlay(case))]
        if self.workers:
            files += ["-f", str(compose.overlay("distributed"))]
        return ["docker", "compose", *files, *command]

    @staticmethod
    def preflight() -> list[str]:
        if shutil.which("docker") is None:
            return ["docker is missing: --backend compose needs Docker with the compose plugin"]
        r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if r.returncode != 0:
            return ["`docker compose` does not work here: install the compose plugin (docker-compose-plugin)"]
        if not os.environ.get("GRAFANA_ADMIN_PASSWORD"):
            return ["GRAFANA_ADMIN_PASSWORD is not set: the compose stack refuses to start without it"]
        return []

    def open(self) -> None:
        pass

    def start_case(self, case: str, env: dict[str, str]) -> int | None:
        run_env = {**os.environ, **env, "LOCUST_WORKERS": str(self.workers or 2)}
        # The stack with this case's overlay, then a fresh proxy even when its config is unchanged.
        subprocess.run(self.argv(case, "up", "-d", "--build", "--wait"), env=run_env, check=True)
        subprocess.run(
            self.argv(case, "up", "-d", "--wait", "--no-deps", "--force-recreate", "proxy"),
            env=run_env,
            check=True,
        )
        return None  # the JVM is in a container: warm-up watches the rate only

    def close(self) -> None:
        subprocess.run(self.argv("singleton-cio", "down"), check=False)

    def describe(self) -> dict:
        keys = (
            "PROXY_CPUS",
            "PROXY_MEMORY",
            "PROXY_JAVA_OPTS",
            "NGINX_CPUS",
            "NGINX_MEMORY",
            "CLIENT_MAX_CONNECTIONS",
        )
        return {
            "kind": "compose",
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            **{k.lower(): os.environ.get(k, self.env.get(k)) for k in keys},
        }
