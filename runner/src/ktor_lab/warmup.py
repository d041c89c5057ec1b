"""The warm-up rule: unmeasured load until the rate is stable and the proxy's JIT is quiet.

On 2 cores the JIT compiles the proxy's path for 50-100 s under load, and the rate doubles or
triples meanwhile; a fixed few seconds would measure the compiler. Load is applied in windows
of WINDOW_S: warm when two windows in a row agree within TOLERANCE (or each of the last two with the
one two before it: a load that completes in waves) and, for a JVM that can be seen, its C1/C2
compiler threads used under JIT_QUIET_SHARE of a core in the last one, half the share a measured
window may have and be kept (verdict.JIT_WINDOW_SHARE): the JIT finishing its last methods is
allowed for, one still compiling the proxy's path is not. At 400 rps the JIT's last methods take
0.1-0.3 s of each 5 s window for 10-20 s more; waiting for 2% of a core as well cost each JVM of
the default matrix that long (docs/matrix.md gives the runs).

During the warm-up those compiler threads run at nice JIT_NICE (when this process may set it:
root, or CAP_SYS_NICE), so the JIT gets the CPU it needs first instead of a third of a core
beside Locust and the proxy's own threads; they are back at the JVM's own nice value before
anything is measured.
The measured JVM is the same: only the order in which the scheduler serves its threads changed
while it warmed.

A proxy whose rate falls below COLLAPSED_SHARE of its best window for COLLAPSED_WINDOWS windows in a
row has stopped answering (per-call Java under 50 users: it never settles); its warm-up ends there,
not warm and `collapsed`, rather than loading a proxy that serves nothing until the limit. Its best
is this warm-up's, or the rate the proxy is known to answer at (`expected`: at a fixed rate after a
warm-up at capacity on the same scenario, the target, or its best there where lower), and a window
under COLLAPSED_SHARE of it never settles the warm-up: two windows of nothing agree too (per-call
Java in the default run of docs/matrix-runs/default "settled" at 12 rps of 400 after 930 at
capacity).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

WINDOW_S = 5
TOLERANCE = 0.05
JIT_QUIET_SHARE = 0.05
JIT_NICE = -10
COLLAPSED_SHARE = 0.1
COLLAPSED_WINDOWS = 4


def thread_cpu_seconds(stat: Path) -> float:
    """utime + stime of a /proc/PID/task/TID/stat, in seconds (the fields after the command's
    name, which may hold spaces and parentheses: [11] utime, [12] stime). OSError when ended."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class JitClock:
    """CPU seconds the JVM's C1/C2 compiler threads used between calls of lap() (from /proc).

    Read from /proc by hand, not with psutil: psutil gives a process's threads with their times
    but not their names, and only the compiler threads count here.

    Counted per thread: the JVM ends compiler threads that fall idle (and starts new ones when
    more than the default two are allowed), and a sum over the live threads would then run
    backwards and pass for a quiet JIT."""

    def __init__(self, pid: int, proc: Path = Path("/proc")):
        self.tasks = proc / str(pid) / "task"
        self.real = proc == Path("/proc")  # a fake /proc's thread IDs are nobody's to renice
        self.nice = os.getpriority(os.PRIO_PROCESS, pid) if self.real else 0  # the JVM's own
        self.last = self.sample()

    def sample(self) -> dict[str, float]:
        out = {}
        for task in self.tasks.iterdir():
            try:
                if (task / "comm").read_text().startswith(("C1 Compiler", "C2 Compiler")):
                    out[task.name] = thread_cpu_seconds(task / "stat")
            except (OSError, IndexError, ValueError):
                continue  # the thread ended meanwhile
        return out

    def prioritize(self, nice: int | None = None) -> bool:
        """Sets the compiler threads' nice value (Linux: per thread; None: back to the JVM's
        own); False when not allowed."""
        nice = self.nice if nice is None else nice
        if not self.real:
            return False
        try:
            for tid in self.sample():
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except PermissionError:
            return False
        except ProcessLookupError:
            pass
        return True

    def lap(self) -> float:
        now = self.sample()
        used = sum(seconds - self.last.get(tid, 0.0) for tid, seconds in now.items())
        self.last = now
        return used


@dataclass
class Warmup:
    seconds: int = 0
    settled: bool = False
    window_rates: list[float] = field(default_factory=list)
    jvm_visible: bool = False
    # CPU seconds the JIT compilers used in each window (when the JVM can be seen)
    window_jit_s: list[float] = field(default_factory=list)
    # the compiler threads' nice value during the warm-up (None: left as they were)
    jit_nice: int | None = None
    # the share of a core the JIT had to stay under in a window for the warm-up to end (None: the
    # JIT not seen, or a result written before this was recorded)
    jit_quiet_share: float | None = None
    # the rate stayed under COLLAPSED_SHARE of its best (or `expected`) for COLLAPSED_WINDOWS windows:
    # ended early
    collapsed: bool = False
    # the rate the proxy was known to answer at this load (0: none known; warm_up's `expected`)
    expected: float = 0.0
    # A warm-up at capacity before this one (the plan's warm_first): its load, scenario, seconds
    # and how it ended (`end`; "": none). At a fixed rate of 50-100 rps the JIT compiles the
    # proxy's path for minutes; at capacity in 25-60 s.
    first_load: str = ""
    first_scenario: str = ""
    first_seconds: int = 0
    first_end: str = ""
    # its 5 s rates and the JIT's CPU seconds in each (what the JIT still compiled when it ended)
    first_window_rates: list[float] = field(default_factory=list)
    first_window_jit_s: list[float] = field(default_factory=list)

    @property
    def end(self) -> str:
        """How it ended: settled, stopped answering (collapsed) or not settled (the limit)."""
        return "settled" if self.settled else "stopped answering" if self.collapsed else "not settled"


def warm_up(
    window: Callable[[int], float],
    limit_s: int,
    jvm_pid: int | None = None,
    jit: JitClock | None = None,
    expected: float = 0.0,
) -> Warmup:
    """Calls `window(WINDOW_S)` (load for that long; returns the rate it saw) until warm or until
    `limit_s` seconds are spent. `jit`: the JVM's compiler clock (made from `jvm_pid` when None).
    `expected`: a rate the proxy is known to answer at this load (0: none known)."""
    jit = jit if jit is not None else JitClock(jvm_pid) if jvm_pid else None
    result = Warmup(settled=limit_s == 0, jvm_visible=jit is not None, expected=expected)
    result.jit_quiet_share = JIT_QUIET_SHARE if jit is not None else None
    previous = None
    if jit is not None and limit_s >= WINDOW_S and jit.prioritize(JIT_NICE):
        result.jit_nice = JIT_NICE
    try:
        while result.seconds + WINDOW_S <= limit_s:
            if result.jit_nice is not None:
                jit.prioritize(JIT_NICE)  # compiler threads the JVM started since
            settles = window_settles(window, result, jit, previous)
            if collapsed(result.window_rates, result.expected):
                result.collapsed, result.settled = True, False
                break
            if settles:
                break
            previous = result.window_rates[-1]
    finally:
        if result.jit_nice is not None:
            jit.prioritize()
    return result


def window_settles(window, result: Warmup, jit: JitClock | None, previous: float | None) -> bool:
    """One window of load, recorded in `result`; True when it leaves the proxy warm: never at a
    rate under COLLAPSED_SHARE of its best before it (or of `result.expected`)."""
    best = max([result.expected, *result.window_rates])
    rate = window(WINDOW_S)
    result.window_rates.append(round(rate, 1))
    result.seconds += WINDOW_S
    quiet = True
    if jit:
        used = jit.lap()
        result.window_jit_s.append(round(used, 2))
        quiet = used < JIT_QUIET_SHARE * WINDOW_S
    answering = rate >= COLLAPSED_SHARE * best
    result.settled = bool(
        quiet and answering and (agree(rate, previous) or repeats_in_waves(result.window_rates))
    )
    return result.settled


def agree(rate: float, previous: float | None) -> bool:
    return bool(previous and abs(rate - previous) <= TOLERANCE * previous)


def repeats_in_waves(rates: list[float]) -> bool:
    """Each of the last two windows agrees with the one two before it: a load that completes in
    waves (100 users on /slow, 2 s each: 200 requests in one 5 s window, 300 in the next, 40 and
    60 rps in turn) never has two windows in a row agree, yet repeats every two."""
    return len(rates) >= 4 and agree(rates[-1], rates[-3]) and agree(rates[-2], rates[-4])


def collapsed(rates: list[float], expected: float = 0.0) -> bool:
    """The last COLLAPSED_WINDOWS rates all under COLLAPSED_SHARE of the best one before them (or of
    `expected`, a rate the proxy is known to answer at)."""
    if len(rates) < COLLAPSED_WINDOWS or (len(rates) == COLLAPSED_WINDOWS and not expected):
        return False
    best = max([expected, *rates[:-COLLAPSED_WINDOWS]])
    return best > 0 and all(r < COLLAPSED_SHARE * best for r in rates[-COLLAPSED_WINDOWS:])
