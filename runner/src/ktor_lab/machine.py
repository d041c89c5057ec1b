"""The machine and versions behind the numbers: commit, CPUs, memory, kernel, tool versions."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path

import psutil

from .paths import REPO


def cpus() -> int:
    return len(os.sched_getaffinity(0))


def cpu_sets(text: str, count: int | None = None) -> tuple[frozenset[int], frozenset[int]] | None:
    """`--cpus`: the CPUs of the proxy under load and those of the lab's other parts, or None
    (`none`: wherever the kernel puts them). `auto`: the upper half for the proxy (on 2 CPUs, CPU 1
    for it and CPU 0 for the rest); `1` or `2-3` or `1,3`: those. ValueError naming what to give."""
    mine = sorted(os.sched_getaffinity(0))
    count = count or len(mine)
    if text == "none":
        return None
    if text == "auto":
        if count < 2:
            raise ValueError("--cpus auto needs 2 CPUs or more (this machine lets the lab use 1): give none")
        proxy = frozenset(mine[count // 2 :])
    else:
        try:
            proxy = frozenset(
                n
                for part in text.split(",")
                for n in (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))
            )
        except ValueError:
            raise ValueError(
                f"--cpus {text!r}: give auto, none, or the proxy's CPUs (e.g. 1, 2-3 or 1,3)"
            ) from None
    rest = frozenset(mine) - proxy
    if not proxy <= set(mine) or not rest:
        raise ValueError(
            f"--cpus {text!r}: give some of CPUs {mine[0]}-{mine[-1]} for the proxy, leaving one for the rest"
        )
    return proxy, rest


def pin(pid: int, cpus: frozenset[int]) -> None:
    """`pid`, its children and every thread of each on `cpus` (a thread's mask is its own, and a new
    thread takes its parent thread's): what has ended meanwhile is skipped."""
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


def placed(pid: int) -> str:
    """The CPUs `pid`'s main thread may run on, as `1` or `0-1` ("": it has ended)."""
    try:
        ids = sorted(os.sched_getaffinity(pid))
    except OSError:
        return ""
    return (
        str(ids[0])
        if len(ids) == 1
        else ",".join(map(str, ids))
        if ids != list(range(ids[0], ids[-1] + 1))
        else f"{ids[0]}-{ids[-1]}"
    )


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
    try:  # psutil does not give the CPU's model name
        cpu_model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "machine": {
            "cpus": cpus(),
            "cpu_model": cpu_model,
            "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
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
    # of those, the load generator's (Locust's processes); None where none of them is seen here
    generator_s: float | None = None


def cpu_sample(container_ids: tuple[str, ...] = ()) -> CpuSample:
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    lab = _lab_cpu_seconds(container_ids)
    generators = [seconds for p, seconds in lab.items() if is_generator(_cmdline(p))]
    return CpuSample(busy, t.steal, sum(lab.values()), sum(generators) if generators else None)


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []  # ended meanwhile


def is_generator(cmdline: list[str]) -> bool:
    """A command line of Locust on the lab's locustfile or config: natively (loadgen.argv), in its
    container (`locust --config locust/locust.conf`) or as a worker; the host sees a container's
    command lines. Only counted (the generator's CPU), never ended by it."""
    names = {Path(part).name for arg in cmdline for part in arg.split(",")}
    return "locust" in {Path(a).name for a in cmdline[:2]} and bool(names & {"locustfile.py", "locust.conf"})


def processes_cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of the processes `pids` so far (an ended one counts 0)."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _lab_cpu_seconds(container_ids: tuple[str, ...]) -> dict[psutil.Process, float]:
    """CPU seconds (its own and its waited-for children's) of this process, its descendants, and
    the processes in the given containers' cgroups (and theirs), by process (whose command line
    cpu_sample reads from the same object: no second lookup by PID)."""
    me = psutil.Process()
    ours = {me, *me.children(recursive=True)}
    if container_ids:
        for p in psutil.process_iter():
            if _in_containers(p.pid, container_ids):
                ours |= {p, *_children(p)}
    out = {}
    for p in ours:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue  # ended meanwhile
        out[p] = t.user + t.system + t.children_user + t.children_system
    return out


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def _in_containers(pid: int, container_ids: tuple[str, ...]) -> bool:
    """Whether the process's cgroup names one of the containers (psutil does not read cgroups)."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return any(c in cgroup for c in container_ids)


def load_average() -> float:
    """The 1-minute load average."""
    return psutil.getloadavg()[0]


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a process (all its threads) has used so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def thread_context_switches(pid: int) -> dict[str, int]:
    """Voluntary context switches of each of a process's live threads so far, by thread ID: each
    is a thread that stopped to wait (for work handed over by another, or for I/O).

    Read from /proc/PID/task/*/status by hand: psutil's num_ctx_switches reads the process's own
    status, which counts its main thread only."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # ended meanwhile
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out[task.name] = int(line.split()[1])
    return out


def switches_between(before: dict[str, int], after: dict[str, int]) -> int:
    """The context switches between two readings of thread_context_switches, counted per thread
    (a sum over the live threads runs backwards when threads end: per-call clients end theirs):
    exact while the threads stay the same (a singleton client), a lower bound otherwise."""
    return sum(max(0, n - before.get(tid, 0)) for tid, n in after.items())


# /proc/net/tcp's state of a socket in TIME_WAIT (include/net/tcp_states.h: TCP_TIME_WAIT = 6),
# and the unit of its timer column (clock ticks, USER_HZ).
TCP_TIME_WAIT = "06"
CLOCK_TICKS = 100


def sockets_in_time_wait(
    pid: int, port: int, files: tuple[str, ...] = ("tcp", "tcp6")
) -> dict[str, float] | None:
    """The TCP sockets in TIME_WAIT to remote `port` in the network namespace of process `pid`
    (natively the host's, in a container its own): "local remote" (the kernel's hex) -> when it
    expires (time.monotonic() seconds); None when the tables cannot be read. A socket in TIME_WAIT
    has no owner left, so on a host where other processes dial the same port this is everyone's:
    compare two reads with `new_in_time_wait`."""
    found: dict[str, float] = {}
    try:
        for name in files:
            now = time.monotonic()
            for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) >= 6 and fields[3] == TCP_TIME_WAIT:
                    if int(fields[2].rsplit(":", 1)[1], 16) == port:
                        ticks = int(fields[5].split(":")[1], 16)
                        found[f"{fields[1]} {fields[2]}"] = now + ticks / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None
    return found


def new_in_time_wait(before: dict[str, float], after: dict[str, float]) -> int:
    """The sockets that went into TIME_WAIT between two reads: those not there before, and those
    whose tuple the kernel reused for a new connection (on loopback it does, at once) that closed
    again: the same addresses, expiring more than a second later than before."""
    return sum(1 for key, expires in after.items() if key not in before or expires > before[key] + 1)
