"""Locust natively: the lab's locustfile run by the Locust installed beside this package."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

from lab_window import WindowStats  # locust/lab_window.py (pip install -e locust)

from ..paths import LOCUST_DIR
from ..processes import Service, free_port, local_url, wait_until


def locust_bin() -> str:
    """The `locust` script of this Python environment."""
    return str(Path(sys.executable).with_name("locust"))


def argv(*options: str, sweep: bool = False) -> list[str]:
    """`locust -f locust/locustfile.py[,locust/sweep.py] --config locust/locust.conf OPTIONS`."""
    files = [str(LOCUST_DIR / "locustfile.py")] + ([str(LOCUST_DIR / "sweep.py")] if sweep else [])
    return [locust_bin(), "-f", ",".join(files), "--config", str(LOCUST_DIR / "locust.conf"), *options]


# Natively the UI is on loopback and asks for no login: a LAB_PASSWORD exported for a stack
# (compose/lan.yml, lab swarm) is not Locust's here (locust/lab_guard.py reads "" as none).
NO_LOGIN = {"LAB_PASSWORD": "", "LAB_PASSWORD_FILE": ""}


def run_finished(web: str) -> bool:
    """True once the Locust web UI at `web` reports its run as stopped (as --autostart runs end)."""
    try:
        return requests.get(f"{web}/stats/requests", timeout=2).json()["state"] == "stopped"
    except (requests.RequestException, ValueError, KeyError):
        return False


def start(
    run_dir: Path,
    name: str,
    web_port: int,
    options: list[str],
    workers: int = 0,
    sweep: bool = False,
) -> list[Service]:
    """Locust with its web UI (and the lab's export) on 127.0.0.1:`web_port`: one process, or a
    master with `workers` workers, which take the master's options. Returns the processes,
    master first; waits until the web UI answers (and, with workers, until all are connected)."""
    web = ["--web-host", "127.0.0.1", "--web-port", str(web_port)]
    services = []
    try:
        if workers:
            master_port = free_port()
            services.append(
                Service(
                    f"{name}-master",
                    argv(
                        "--master",
                        "--master-bind-host",
                        "127.0.0.1",
                        "--master-bind-port",
                        str(master_port),
                        "--expect-workers",
                        str(workers),
                        *web,
                        *options,
                        sweep=sweep,
                    ),
                    run_dir / f"{name}-master.log",
                    NO_LOGIN,
                )
            )
            for i in range(workers):
                services.append(
                    Service(
                        f"{name}-worker-{i}",
                        argv(
                            "--worker",
                            "--master-host",
                            "127.0.0.1",
                            "--master-port",
                            str(master_port),
                            sweep=sweep,
                        ),
                        run_dir / f"{name}-worker-{i}.log",
                        NO_LOGIN,
                    )
                )
        else:
            services.append(
                Service(name, argv(*web, *options, sweep=sweep), run_dir / f"{name}.log", NO_LOGIN)
            )
        services[0].wait_http(local_url(web_port, "/metrics"), timeout=60)
        if workers:
            client = LocustWeb(local_url(web_port))
            if not wait_until(lambda: client.stats().workers >= workers, timeout=60):
                raise TimeoutError(f"only {client.stats().workers} of {workers} Locust workers connected")
        return services
    except BaseException:
        for s in reversed(services):
            s.stop()
        raise


class LocustWeb:
    """Locust's web API (and the lab's /lab/stats) for a process started with its web UI; `auth`
    is (user, password) for a UI that asks for a login (locust/lab_guard.py: the swarm stack's)."""

    def __init__(self, base: str, auth: tuple[str, str] | None = None):
        self.base = base.rstrip("/")
        self.auth = auth

    def swarm(self, host: str, users: int, spawn_rate: float, **custom: str | float | int) -> None:
        """Starts (or changes) a run; `custom` are the locustfile's options (scenario=..., load_model=...)."""
        form = {"host": host, "user_count": users, "spawn_rate": spawn_rate, **custom}
        r = requests.post(f"{self.base}/swarm", data=form, timeout=10, auth=self.auth)
        r.raise_for_status()
        body = r.json()
        if not body.get("success"):
            raise RuntimeError(f"Locust refused the run: {body.get('message')}")

    def stop(self) -> None:
        requests.post(f"{self.base}/stop", timeout=10, auth=self.auth).raise_for_status()
        wait_until(lambda: self.stats().state in ("stopped", "ready"), timeout=30)

    def reset(self) -> None:
        """Locust's reset, once its workers have sent what they counted before it (lab_export.Flush)."""
        requests.post(f"{self.base}/lab/reset", timeout=10, auth=self.auth).raise_for_status()

    def rate_over(self, seconds: float, meanwhile: Callable[[], object] | None = None) -> float:
        """Requests per second over the next `seconds` (the load keeps running); `meanwhile` is
        done within them (they last longer when it does)."""
        before = self.stats()
        if meanwhile is not None:
            began = time.monotonic()
            meanwhile()
            seconds = max(0.0, seconds - (time.monotonic() - began))
        time.sleep(seconds)
        after = self.stats()
        return (after.requests - before.requests) / max(after.now - before.now, 1e-3)

    def proxy_metrics(self, timeout: float = 30) -> str:
        """The /metrics of the host Locust was started with, as Locust reads them (locust/lab_export.py):
        the proxy of a swarm stack answers on its overlay only. requests.RequestException when it
        does not answer within `timeout` (Locust's own read waits as long)."""
        r = requests.get(
            f"{self.base}/lab/proxy-metrics", params={"timeout": timeout}, timeout=timeout + 5, auth=self.auth
        )
        r.raise_for_status()
        return r.text

    def stats(self) -> WindowStats:
        """Totals since the last reset (locust/lab_window.py)."""
        r = requests.get(f"{self.base}/lab/stats", timeout=10, auth=self.auth)
        r.raise_for_status()
        return WindowStats(**r.json())
