"""Locust natively: the lab's locustfile run by the Locust installed beside this package."""

from __future__ import annotations

import sys
from pathlib import Path

import requests

from .paths import LOCUST_DIR


def locust_bin() -> str:
    """The `locust` script of this Python environment."""
    return str(Path(sys.executable).with_name("locust"))


def argv(*options: str, sweep: bool = False) -> list[str]:
    """`locust -f locust/locustfile.py[,locust/sweep.py] --config locust/locust.conf OPTIONS`."""
    files = [str(LOCUST_DIR / "locustfile.py")] + ([str(LOCUST_DIR / "sweep.py")] if sweep else [])
    return [locust_bin(), "-f", ",".join(files), "--config", str(LOCUST_DIR / "locust.conf"), *options]


def run_finished(web: str) -> bool:
    """True once the Locust web UI at `web` reports its run as stopped (as --autostart runs end)."""
    try:
        return requests.get(f"{web}/stats/requests", timeout=2).json()["state"] == "stopped"
    except (requests.RequestException, ValueError, KeyError):
        return False
