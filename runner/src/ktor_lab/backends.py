"""Where `lab run` finds the parts: host processes (native) or the compose stack.

A backend starts the shared parts once (`open`), a fresh proxy per run (`start_case`),
and tells the measurement where Locust's web API, the proxy's /metrics and Prometheus answer.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import versions
from .parts import compose
from .paths import PROXY_JAR
from .processes import free_port
from .stack import Ports, Stack, missing


class NativeBackend:
    # Every 2 s (timeout 2 s): an overloaded proxy can take over a second to answer /metrics.
    scrape_seconds = 2

    def __init__(self, run_dir: Path, ports: Ports, java_opts: str, workers: int, first_case: str):
        self.stack = Stack(run_dir, ports, java_opts.split(), scrape_interval=f"{self.scrape_seconds}s")
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

    @staticmethod
    def missing() -> list[str]:
        return missing()

    def open(self) -> None:
        self.stack.nginx()
        self.stack.exporter()
        self.stack.prometheus()
        self.stack.locust(self.first_case, self.workers)

    def start_case(self, case: str, env: dict[str, str], ktor: str = "", java: str = "") -> int | None:
        """A fresh proxy for `case`, of the Ktor release `ktor` on the JDK `java` ("": the defaults;
        the jars are built before the run: commands/run.py)."""
        jar = versions.jar("proxy-app", versions.release(ktor)) if ktor else PROXY_JAR
        java_bin = versions.jdk(java).java if java else None
        return self.stack.proxy(case, jar=jar, java=java_bin, **env).service.pid

    def container_ids(self) -> tuple[str, ...]:
        """Containers whose processes are the lab's (none: every part is a child of this process)."""
        return ()

    def close(self) -> None:
        self.stack.stop()

    def describe(self) -> dict:
        return {
            "kind": "native",
            "java_opts": self.java_opts,
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            "ports": vars(self.stack.ports),
            "note": "every part shares this machine's CPUs; no limits per process",
        }


class ComposeBackend:
    """The compose stack as a project of its own (`ktor-lab-run-<pid>`, free host ports), brought
    up per case with that case's overlay; only the services a run needs (Grafana if asked for).
    `close` removes its containers, network and volumes."""

    scrape_seconds = 5  # prometheus/prometheus.yml, used as is

    def __init__(
        self, workers: int, grafana: bool = False, name: str | None = None, releases: tuple[str, ...] = ()
    ):
        services = ("proxy", "nginx", "locust", "prometheus", *(("grafana",) if grafana else ()))
        self.project = compose.Project(
            name or f"ktor-lab-run-{os.getpid()}",
            {s: free_port() for s in services},
            workers=workers,
            grafana=grafana,
        )
        self.workers = workers
        self.releases = releases

    @property
    def locust_url(self) -> str:
        return self.project.url("locust")

    locust_host = "http://proxy:8080"

    @property
    def proxy_metrics_url(self) -> str:
        return self.project.url("proxy")

    @property
    def prometheus_url(self) -> str:
        return self.project.url("prometheus")

    @staticmethod
    def missing() -> list[str]:
        problem = compose.engine_problem()
        return [f"{problem} (--backend compose)"] if problem else []

    def open(self) -> None:
        if removed := compose.remove_orphans():
            print(f"lab run: removed what killed runs left on the engine: {', '.join(removed)}", flush=True)
        # The images from today's sources (Docker's cache makes this quick when nothing changed),
        # the proxy's once per Ktor release of the plan (KTOR_VERSION, its own tag).
        for release in self.releases or ("",):
            self.project.build(**({"KTOR_VERSION": release} if release else {}))

    def start_case(self, case: str, env: dict[str, str], ktor: str = "", java: str = "") -> int | None:
        """The case's overlay up with a fresh proxy; the proxy's host PID when it can be seen
        (the engine on this kernel), so the warm-up can watch its JIT as natively. `ktor` is the
        release the proxy's image is built with (its own tag per release); the JDK is the image's
        (PROXY_RUN_IMAGE in .env), so `java` is refused before the run (commands/run.py)."""
        self.project.env.update(env)
        if ktor:
            self.project.env["KTOR_VERSION"] = ktor
        self.project.up(case, fresh_proxy=True)
        return self.project.container_pid("proxy")

    def container_ids(self) -> tuple[str, ...]:
        """The project's containers: their processes count as the lab's, not as other work."""
        return self.project.container_ids()

    def close(self) -> None:
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
            "kind": "compose",
            "project": self.project.name,
            "services": self.project.services(),
            "locust_workers": self.workers,
            "scrape_interval_s": self.scrape_seconds,
            **{k.lower(): self.project.env.get(k, env.get(k)) for k in keys},
        }
