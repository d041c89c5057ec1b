"""The machine and versions behind the numbers: commit, CPUs, memory, kernel, tool versions."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib.metadata import version as package_version
from pathlib import Path

from .paths import REPO


def cpus() -> int:
    return len(os.sched_getaffinity(0))


def version(argv: list[str]) -> str:
    """The first line a tool prints of its own version (`missing` when it cannot be run)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except OSError:
        return "missing"
    out = (r.stdout + r.stderr).strip()
    return out.splitlines()[0] if out else "?"


def java() -> str:
    """The java to run the proxy with: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    import shutil

    return shutil.which("java") or "java"


def git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def environment() -> dict:
    """Commit, versions and machine, recorded beside the numbers."""
    cpu_model = "unknown"
    try:
        cpu_model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    mem_kb = 0
    try:
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())[1])
    except (OSError, TypeError):
        pass
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "machine": {
            "cpus": cpus(),
            "cpu_model": cpu_model,
            "memory_gib": round(mem_kb / (1 << 20), 1),
            "kernel": platform.release(),
            "hostname": platform.node(),
        },
        "versions": {
            "java": version([java(), "-version"]),
            "locust": package_version("locust"),
            "python": platform.python_version(),
            "nginx": version(["nginx", "-v"]),
            "prometheus": version(["prometheus", "--version"]),
        },
    }
