"""The machine and versions behind the numbers: commit, CPUs, memory, kernel, tool versions."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path

from .paths import REPO
from .processes import cpu_seconds, stat_fields


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


@dataclass
class CpuSample:
    """CPU seconds so far: the whole machine's busy time (not idle, not iowait), its steal, and
    the lab's own processes' (this process, its descendants, and the given containers')."""

    busy_s: float
    steal_s: float
    lab_s: float


def cpu_sample(container_ids: tuple[str, ...] = ()) -> CpuSample:
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    busy = user + nice + system + irq + softirq + steal
    lab = sum(t for _, t in _lab_processes(container_ids))
    return CpuSample(busy / tick, steal / tick, lab / tick)


def _lab_processes(container_ids: tuple[str, ...]) -> list[tuple[int, int]]:
    """(pid, utime + stime + the times of its waited-for children) of this process, its
    descendants, and the processes in the given containers' cgroups."""
    me = os.getpid()
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, ticks)
    in_containers: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            rest = stat_fields(entry / "stat")
            if container_ids and any(c in (entry / "cgroup").read_text() for c in container_ids):
                in_containers.add(pid)
        except (OSError, IndexError):
            continue  # ended meanwhile
        stats[pid] = (int(rest[1]), sum(int(x) for x in rest[11:15]))  # utime stime cutime cstime
    ours = {me} | in_containers
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in stats.items() if ppid in ours} - ours
        ours |= children
        grew = bool(children)
    return [(pid, stats[pid][1]) for pid in ours if pid in stats]


def load_average() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a process (all its threads) has used so far."""
    return cpu_seconds(stat_fields(Path(f"/proc/{pid}/stat")))


def process_context_switches(pid: int) -> int:
    """Voluntary context switches of a process's live threads so far: each is a thread that
    stopped to wait (for work handed over by another, or for I/O). Threads that ended took their
    counts with them, so between two readings this is exact only when the threads stay the same
    (a singleton client), a lower bound otherwise."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # ended meanwhile
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total
