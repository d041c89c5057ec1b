"""What set a run's rate: the engine, or something the report must not pass off as the engine.

The rules, in order (a run can earn several flags; `capacity` is true only with none):

- `generator-saturated`: a Locust process reached 90% CPU in the window. The rate is
  the generator's; nothing about the proxy's capacity follows from it.
- `load-model`: closed loop with a think time. Each user waits `wait` between requests,
  so the rate is users / (wait + latency) by construction (Little's law). When the wait
  is at least half of that cycle, the rate says more about the users and their wait than
  about the engine (the earlier compose lab: 1000 users, 1-2 s wait).
- `target`: the rate model reached its target (within 5%, and the pacing's grain:
  `pacing_grain`). The engine kept up; its capacity is higher than the rate shown.
  Latency, CPU and threads at that rate still count.
- `errors`: more than 1% of the requests failed.
- `not-warm`: the JIT compiler threads used more than JIT_WINDOW_SHARE of a core during the
  window itself, or the warm-up ended before the rate was stable and the JIT quiet and the
  window's own JIT was not seen quiet (`jit_quiet`); the figures may still climb. A proxy that
  stopped answering in its warm-up (warmup.collapsed), or in its first one at capacity
  (--warm-first), ends it there and is flagged with that reason.
- `leak`: some seconds after the load stopped, the proxy still held more than LEAK_THREADS
  threads or LEAK_FILES open files (and one of each per user: a pool may keep a connection and
  a thread per request that was in flight until its keep-alive, which grows with the users, a
  leak with the requests) above what it held idle before the load: resources kept
  until the garbage collector finds them, or never released (per-call Java: each JDK client
  keeps its selector thread and sockets). Pools shrink within the keep-alive; this stays.
  It says nothing about who set the rate, so it does not take away `capacity`. The callers'
  connections still open (a load generator's users keep theirs after the load stops: 200 users,
  200 files) are left out of the files, idle and after alike.

- `unresponsive`: the proxy did not answer its own /metrics (PROXY_SCRAPE_S) at an edge of
  the window or after it: it collapsed under the load (per-call Java, with thousands of
  threads). Locust's figures stand; the proxy's own (CPU per request, its percentiles, the
  leak check) are missing where it did not answer.
- `machine-busy`: during the window, processes other than the lab's (this command, its
  children, the compose project's containers) used at least BUSY_SHARE of the machine's
  CPUs, or the hypervisor stole at least STEAL_SHARE (from /proc): the rate is partly the
  other work's. The report says so at its top.
- `generator-latency`: Locust's median is more than GENERATOR_ADDED_MS and GENERATOR_ADDED_SHARE
  above the median the proxy's own server timer measured over the same window: the latency
  columns are largely the generator's (a busy Python process, queueing before the proxy).
  The server's percentiles stand beside Locust's in the report. It says nothing about who
  set the rate.
- `proxy-exceptions`: the proxy logged an exception with its stack trace between its start and
  the leak check (results' `proxy_log`): something in it failed that its counters may not show
  (an engine's I/O thread dying, say; Apache5's close race is one, docs/proxy.md). It says
  nothing about who set the rate; the reason names the classes and the first one's line.

- `scrapes-missed`: Prometheus tried the proxy's /metrics during the window and some scrapes did
  not answer within its timeout (the scrape interval: an overloaded proxy's /metrics is slow), or
  its figures were read before Prometheus had scraped the proxy after the window (the lab waits
  two scrape intervals for that, or the run was stopped meanwhile). The highs read from
  Prometheus (threads, heap, open files, pools) are of the scrapes that answered: at least those.
  The proxy's own counters at the window's edges (CPU per request, its requests) do not depend on
  them. It says nothing about who set the rate.

A run without a rate flag (all but `leak`, `generator-latency`, `proxy-exceptions` and
`scrapes-missed`) ran the proxy at the limit of what it does with that concurrency: its rate is
presented as the case's capacity.
"""

from __future__ import annotations

import math

from .results import Run, Verdict, Warmup
from .warmup import COLLAPSED_SHARE, COLLAPSED_WINDOWS, WINDOW_S

SATURATION_CPU_PERCENT = 90.0
WAIT_SHARE_LIMIT = 0.5
TARGET_TOLERANCE = 0.05
ERROR_RATIO_LIMIT = 0.01
LEAK_THREADS = 200
LEAK_FILES = 200
BUSY_SHARE = 0.10
STEAL_SHARE = 0.05
GENERATOR_ADDED_MS = 5.0
# The JIT's compiler threads busy for more than this share of a core in a window: still compiling.
JIT_WINDOW_SHARE = 0.10
GENERATOR_ADDED_SHARE = 0.5
# Flags that say something else than the engine set the rate.
RATE_FLAGS = (
    "generator-saturated",
    "load-model",
    "target",
    "errors",
    "not-warm",
    "unresponsive",
    "machine-busy",
)
# Every flag a window can carry: the rate flags, then those that say something of the proxy.
FLAGS = (*RATE_FLAGS, "leak", "generator-latency", "proxy-exceptions", "scrapes-missed")


def warm_first_hint(run: Run) -> str:
    """What a not-warm reason adds under a load at which the JIT warms slowly (a fixed rate, a wait,
    slow answers) with no warm-up at capacity before it; "" otherwise."""
    load = run.load
    slow = load.model == "rate" or load.wait_max > 0 or run.scenario == "slow"
    if run.warmup.first_load or not slow:
        return ""
    return (
        "; at a fixed rate, a wait or slow answers the JIT compiles for minutes: --warm-first "
        "closed/50/0 warms the proxy at capacity first"
    )


def jit_busy(run: Run) -> bool:
    """The proxy warmed by the rule, yet its JIT compiled for more than JIT_WINDOW_SHARE of a core
    in this window (the tail of its compiling: on 2 cores, mostly the first rounds after the
    warm-up): `not-warm` for the window."""
    jit = run.proxy.jit_cpu_seconds_in_window
    settled = run.warmup.settled and not stopped_answering(run.warmup)
    return bool(
        settled and jit is not None and run.window.seconds and jit > JIT_WINDOW_SHARE * run.window.seconds
    )


def jit_quiet(run: Run) -> bool:
    """The JIT's compiler threads measured in this window and at most JIT_WINDOW_SHARE of a core:
    the window is of a warm JVM whatever its warm-up's end (at a fixed rate, per-call clients keep
    the JIT at a few percent of a core for minutes, above the warm-up's stricter quiet)."""
    jit = run.proxy.jit_cpu_seconds_in_window
    return bool(jit is not None and run.window.seconds and jit <= JIT_WINDOW_SHARE * run.window.seconds)


def judge(run: Run) -> Verdict:
    """The flags of one run, each with its reason; `capacity` when none is a rate flag."""
    found = [*rate_flags(run), *warmth_flags(run), *state_flags(run), *leak_flags(run), *record_flags(run)]
    flags = [flag for flag, _ in found]
    return Verdict(flags, not any(f in RATE_FLAGS for f in flags), [why for _, why in found])


Flags = list[tuple[str, str]]  # (flag, its reason)


def reached_target(run: Run) -> bool:
    """At a fixed rate: whether the window's rate (Locust's requests over its own span) reached its
    target, but for TARGET_TOLERANCE and for the pacing's grain (`pacing_grain`)."""
    rps, requests = run.locust.rps or 0.0, run.locust.requests
    span = requests / rps if requests and rps else 0.0
    grain = pacing_grain(run.load.users, run.load.target_rps, span) / span if span else 0.0  # as a rate
    return rps >= (1 - TARGET_TOLERANCE) * run.load.target_rps - grain


def pacing_grain(users: int, target_rps: float, span: float) -> float:
    """Two standard deviations, in requests, of a window's count under Locust's rate model when the
    proxy keeps the rate: each of the users starts a request every users/target seconds from a
    phase of its own, so a window of `span` seconds holds the whole of each user's share or one
    more (the fraction f of the share: a user's count varies by f(1-f)). At 5 rps with 20 users a
    10 s window holds 50 requests give or take 2 (4.5 allowed); with 400 users, each 0 or 1
    (13 allowed); at 400 rps with 40 users, 6 of 4,000."""
    if users <= 0 or target_rps <= 0 or span <= 0:
        return 0.0
    share = target_rps * span / users
    f = share - math.floor(share)
    return 2 * math.sqrt(users * f * (1 - f))


def rate_flags(run: Run) -> Flags:
    """What set the rate besides the engine (the generator, the load model, the target), and errors."""
    load, locust, out = run.load, run.locust, []
    peak = max(locust.cpu_peak_percent.values(), default=0.0)
    if locust.saturated or peak >= SATURATION_CPU_PERCENT:
        out.append(("generator-saturated", f"Locust reached {peak:.0f}% CPU: the rate is the generator's"))
    rps = locust.rps or 0.0
    latency_s = (locust.avg_ms or 0.0) / 1000
    if load.model == "closed" and load.wait_max > 0:
        wait = (load.wait_min + load.wait_max) / 2
        share = wait / (wait + latency_s)
        model_rps = load.users / (wait + latency_s)
        if share >= WAIT_SHARE_LIMIT:
            out.append(
                (
                    "load-model",
                    f"closed loop: {load.users} users / ({wait:g} s wait + {latency_s * 1000:.0f} ms) = "
                    f"{model_rps:.0f} rps, measured {rps:.0f}: the wait sets the rate",
                )
            )
    if load.model == "rate" and load.target_rps and reached_target(run):
        out.append(("target", f"reached its target of {load.target_rps:g} rps: capacity is higher"))
    if locust.requests and (locust.failures or 0) / locust.requests > ERROR_RATIO_LIMIT:
        out.append(("errors", f"{locust.failures} of {locust.requests} requests failed"))
    return out


def stopped_answering(w: Warmup) -> bool:
    """The proxy stopped answering in a warm-up, or in its first at capacity (--warm-first): every
    window after it is `not-warm` (warmth_flags), whatever the window's own JIT did."""
    return w.collapsed or w.first_end == "stopped answering"


def warmth_flags(run: Run) -> Flags:
    """`not-warm`, with the first reason that holds: a collapse in a warm-up, a warm-up that did
    not settle (unless the window's own JIT was quiet), or the JIT busy in the window."""
    jit, w = run.proxy.jit_cpu_seconds_in_window, run.warmup
    if stopped_answering(w):
        why = (
            f"stopped answering in its warm-up (the rate under {COLLAPSED_SHARE:.0%} of its best"
            + (f", or of the {w.expected:g} rps it answered at capacity," if w.expected else "")
            + f" for {COLLAPSED_WINDOWS * WINDOW_S} s), which ended there, at {w.seconds:.0f} s"
            if w.collapsed
            else f"stopped answering in its first warm-up, at {w.first_load} (--warm-first), which "
            "ended there: its windows are of a proxy that collapsed before them"
        )
        return [("not-warm", why)]
    if not run.warmup.settled and not jit_quiet(run):
        return [
            (
                "not-warm",
                f"not warm after {run.warmup.seconds:.0f} s of warm-up: figures may still climb"
                + warm_first_hint(run),
            )
        ]
    if jit_busy(run):
        return [
            (
                "not-warm",
                f"the JIT compiled for {jit:.1f} s of the {run.window.seconds:.0f} s window "
                f"(more than {JIT_WINDOW_SHARE:.0%} of a core): figures may still climb"
                + warm_first_hint(run),
            )
        ]
    return []


def state_flags(run: Run) -> Flags:
    """The proxy not answering, the machine busy with other work, the generator's latency."""
    out = []
    if run.unanswered:
        out.append(
            (
                "unresponsive",
                f"the proxy did not answer its /metrics ({'; '.join(run.unanswered)}): it collapsed",
            )
        )
    m = run.machine
    if m is not None and (m.others_share >= BUSY_SHARE or m.steal_share >= STEAL_SHARE):
        out.append(
            (
                "machine-busy",
                f"other processes used {m.others_cores:.2f} of {m.cpus} CPUs ({m.others_share:.0%}; "
                f"threshold {BUSY_SHARE:.0%}) and steal was {m.steal_share:.0%} during the window: "
                "the machine was busy",
            )
        )
    server_p50, locust_p50 = run.proxy.server_p50_ms, run.locust.p50_ms
    if server_p50 is not None and locust_p50 is not None:
        added = locust_p50 - server_p50
        if added > GENERATOR_ADDED_MS and added > GENERATOR_ADDED_SHARE * server_p50:
            out.append(
                (
                    "generator-latency",
                    f"Locust's p50 {locust_p50:g} ms against the proxy's own {server_p50:g} ms: "
                    f"{added:.0f} ms of it is the generator's or queueing before the proxy",
                )
            )
    return out


def leak_flags(run: Run) -> Flags:
    """Threads or open files the proxy kept after the load, beyond what its pools may keep."""
    leak = run.leak
    if leak is None or not leak.known():
        return []
    threads = leak.threads_after - leak.threads_idle
    files = leak.files_kept()
    # A pool may keep a connection and a thread per request that was in flight until its
    # keep-alive ends: that grows with the users, a leak with the requests.
    users = run.load.users if run.load else 0
    max_threads, max_files = LEAK_THREADS + users, LEAK_FILES + users
    if threads <= max_threads and files <= max_files:
        return []
    callers = (
        f", the callers' {leak.callers_after:.0f} open connections left out"
        if leak.callers_after is not None
        else ""
    )
    return [
        (
            "leak",
            f"{threads:.0f} threads and {files:.0f} open files above the idle proxy's "
            f"{leak.settle_s:.0f} s after the load stopped{callers} "
            f"(threshold {max_threads:.0f} and {max_files:.0f}: {LEAK_THREADS} and {LEAK_FILES}, "
            f"and one of each per user for the pools)",
        )
    ]


def record_flags(run: Run) -> Flags:
    """What the records say: scrapes Prometheus missed, exceptions the proxy logged."""
    out = []
    tried, answered = run.prometheus.scrapes_tried, run.prometheus.scrapes_answered
    missed = []
    if run.prometheus.scraped_after_end is False:
        missed.append(
            "Prometheus had not scraped the proxy since the window ended when its figures were read "
            "(the lab waited two scrape intervals, or the run stopped meanwhile): its threads, heap "
            "and files highs end before the window, or are missing"
        )
    if tried and answered is not None and answered < tried:
        missed.append(
            f"Prometheus got {answered:.0f} of its {tried:.0f} scrapes of the "
            "proxy in time during the window: its threads, heap and files highs are of those, at least"
        )
    if missed:
        out.append(("scrapes-missed", "; ".join(missed)))
    logged = run.proxy_log
    if logged is not None and logged.exceptions:
        kinds = ", ".join(f"{name.rsplit('.', 1)[-1]} x{n}" for name, n in logged.kinds.items())
        out.append(
            (
                "proxy-exceptions",
                f"the proxy logged {logged.exceptions} exception(s) with a stack trace ({kinds}); "
                f"first: {logged.first}",
            )
        )
    return out
