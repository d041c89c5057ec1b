"""The folders commands write into: runs/<time>-<name>/ for logs and configs, results/ for figures."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .paths import REPO


def stamp() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}"


def run_dir(name: str, given: Path | None = None) -> Path:
    """`given`, or runs/<time>-<name>/ in the repository; made if missing."""
    d = given or REPO / "runs" / f"{stamp()}-{name}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def results_dir(given: Path | None = None, name: str = "") -> Path:
    """`given`, or results/<time>/ (results/study-<name>-<time>/ for a study); made if missing."""
    d = given or REPO / "results" / (f"study-{name}-{stamp()}" if name else stamp())
    d.mkdir(parents=True, exist_ok=True)
    return d
