"""Which windows count, and what each figure is: the one place `lab run`, `lab compare`, `lab bench`
and the studies read them from.

- `FIGURES`: every figure a window gives (how to read it from a run, its units, which way is
  better, the flags that make a row of it not comparable with the others); `BY_KEY` by name.
- The figure lists each reading compares: the first screen's (`VERDICT_FIGURES`), a change of
  release, JDK or round trip (`CHANGE_FIGURES`, `CHANGE_FIGURES_BY_DIMENSION`), two runs of one
  plan (`COMPARED_FIGURES`), a study's (`STUDY_FIGURES`).
- Which of a row's windows its figures are made of (`kept_windows`): those without a flag of
  `LEFT_OUT` (the JVM still compiling, a busy machine, missed scrapes), unless the engine itself
  failed in them (`ENGINE_FLAGS`: that is the finding); every window when fewer than `MIN_KEPT`
  would be kept.
- Whether a row's kept windows compare with another's on a figure (`why_not_compared`): measured,
  no flag that makes the figure not comparable, and at a fixed rate every window at its rate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lab_latency import merged, percentile_ms

from . import metrics, verdict
from .plan import Load
from .results import Run


@dataclass(frozen=True)
class Figure:
    key: str
    heading: str
    get: Callable[[Run], float | None]
    digits: int
    better: str  # "higher", "lower", or "" (no better direction: a count)
    # Flags that make a row's value of this figure not comparable with the others'.
    not_comparable: tuple[str, ...] = (
        "generator-saturated",
        "errors",
        "not-warm",
        "machine-busy",
        "unresponsive",
    )
    # What the first screen calls it.
    words: str = ""
    # A figure of each window that the engine does not cause and that moves this one with it (the
    # machine both share): its movement is taken out (conclusions.GroupFigures, an ANCOVA on logs).
    covariate: Callable[[Run], float | None] | None = None
    # A percentile of a latency histogram (lab_latency, encoded in the window): a row's value is its
    # JVMs' merged histograms' percentile, one value a JVM (`jvm_values`), not a mean of windows'.
    histogram: Callable[[Run], str] | None = None
    # The same for a percentile of one of the proxy's own histograms (its server timer, its upstream
    # call's), kept as bucket counts (metrics.own_counts) a window.
    buckets: Callable[[Run], dict[str, float]] | None = None
    percentile: float = 0.0

    @property
    def said(self) -> str:
        """How a sentence names it: its words, else its heading."""
        return self.words or self.heading


def _mib(v: float | None) -> float | None:
    return None if v is None else v / (1 << 20)


def cpu_without_jit(r: Run) -> float | None:
    """The proxy's CPU s per 1,000 requests less what its JIT compiler threads used in the window
    (None when the JIT was not seen: the compose backend). The JIT's compiling is the JVM's
    warming, not the requests' cost: where it still ran in a window (on a slow machine, in the
    first rounds after the warm-up), it added up to a quarter to that window's CPU per request,
    more to some rows than to others."""
    p = r.proxy
    if p.jit_cpu_seconds_in_window is None or p.cpu_seconds_per_1000_requests is None:
        return None
    if not p.upstream_requests:
        return None
    return max(0.0, p.cpu_seconds - p.jit_cpu_seconds_in_window) / p.upstream_requests * 1000


def generator_cost(r: Run) -> float | None:
    """The load generator's CPU seconds per 1,000 requests in the window (None: not recorded). At a
    fixed rate Locust's work per request is the same whatever the engine (the default runs kept in
    docs/matrix-runs read no difference between rows, p = 0.42), so what moves it moves the proxy
    too: the machine they share."""
    if r.machine is None:
        return None
    cores, seconds, requests = r.machine.generator_cores, r.machine.window_s, r.locust.requests
    return cores * seconds / requests * 1000 if cores and cores > 0 and seconds and requests else None


def _intended(r: Run) -> str:
    return r.locust.latency_intended


def _sent(r: Run) -> str:
    return r.locust.latency_sent


def _served(r: Run) -> dict[str, float]:
    return r.proxy.server_buckets


def _called(r: Run) -> dict[str, float]:
    return r.proxy.upstream_buckets


@functools.lru_cache(maxsize=4096)
def merged_histogram(texts: tuple[str, ...]):
    """The encoded histograms `texts` merged (lab_latency.merged), once: a report reads each
    window's and each JVM's at several percentiles, in its tables, charts and results.csv."""
    return merged(texts)


def tail(
    key: str,
    heading: str,
    p: float,
    histogram: Callable[[Run], str],
    old: Callable[[Run], float | None] = lambda r: None,
    words: str = "",
) -> Figure:
    """A latency percentile (ms, lower is better): of a window's histogram, of a row's JVMs' merged
    ones (`jvm_values`); `old` reads Locust's rounded figure where a window has no histogram
    (results.json written before them)."""

    def get(r: Run) -> float | None:
        return percentile_ms(merged_histogram((histogram(r),)), p) if histogram(r) else old(r)

    return Figure(key, heading, get, 2, "lower", words=words, histogram=histogram, percentile=p)


def proxy_tail(
    key: str, heading: str, p: float, buckets: Callable[[Run], dict[str, float]], get, digits: int
) -> Figure:
    """A percentile of the proxy's own histogram (ms, lower is better): `get` reads a window's (the
    figure measure.py wrote); a row's merges each JVM's windows' buckets (`jvm_values`)."""
    return Figure(key, heading, get, digits, "lower", buckets=buckets, percentile=p)


def late_per_1000(r: Run) -> float | None:
    """Intended starts sent late because the user was still busy (never sent included), per 1,000."""
    s = r.locust
    return s.late_starts / s.starts * 1000 if s.starts else None


def jvm_values(figure: Figure, runs: Sequence[Run]) -> tuple[list[float | None], list[int]]:
    """A row's values of `figure` and the JVM (fork) of each: one a window, or for a percentile of
    a latency histogram one a JVM, of its windows' histograms merged (a tail over every request the
    JVM served, not a mean of windows' tails); Locust's per-window figure where no window has one.
    The proxy's own percentiles likewise, from their buckets (a window without any, where the
    proxy served nothing, adds nothing to its JVM's); each window's own figure in runs kept before
    windows kept buckets."""
    if figure.buckets is not None and any(figure.buckets(r) for r in runs):
        own: dict[int, list[dict[str, float]]] = {}
        for r in runs:
            own.setdefault(r.fork, []).append(figure.buckets(r) or {})
        tails = [metrics.quantile(metrics.cumulative_of(*h), figure.percentile / 100) for h in own.values()]
        return [None if s is None else s * 1000 for s in tails], list(own)
    if figure.histogram is None or not any(figure.histogram(r) for r in runs):
        return [figure.get(r) for r in runs], [r.fork for r in runs]
    by: dict[int, list[str]] = {}
    for r in runs:
        by.setdefault(r.fork, []).append(figure.histogram(r))
    return [percentile_ms(merged_histogram(tuple(t)), figure.percentile) for t in by.values()], list(by)


def _connections(attribute: str) -> Callable[[Run], float | None]:
    return lambda r: getattr(r.connections, attribute) if r.connections else None


FIGURES = [
    Figure("rps", "rps", lambda r: r.locust.rps, 0, "higher", verdict.RATE_FLAGS, "rps"),
    # Latency from the intended start (lab_latency), at microseconds; Locust's, rounded, in older runs.
    tail("p50", "p50 ms", 50, _intended, lambda r: r.locust.p50_ms),
    tail("p95", "p95 ms", 95, _intended, lambda r: r.locust.p95_ms),
    tail("p99", "p99 ms", 99, _intended, lambda r: r.locust.p99_ms, "p99 latency"),
    tail("p999", "p99.9 ms", 99.9, _intended, words="p99.9 latency"),
    # From the send (Locust's own, unrounded): what the intended start's figure adds is the wait
    # for a start the user was late for (coordinated omission) and the generator's own delay.
    tail("sent_p99", "p99 ms from the send", 99, _sent, words="p99 from the send"),
    Figure("late", "late starts / 1k", late_per_1000, 1, "lower"),
    proxy_tail("server_p50", "proxy p50 ms", 50, _served, lambda r: r.proxy.server_p50_ms, 1),
    proxy_tail("server_p99", "proxy p99 ms", 99, _served, lambda r: r.proxy.server_p99_ms, 1),
    proxy_tail("upstream_p50", "upstream call p50 ms", 50, _called, lambda r: r.proxy.upstream_p50_ms, 2),
    proxy_tail("upstream_p99", "upstream call p99 ms", 99, _called, lambda r: r.proxy.upstream_p99_ms, 2),
    Figure("errors", "errors", lambda r: r.locust.failures, 0, "lower"),
    Figure(
        "cpu",
        "CPU s / 1000 req",
        lambda r: r.proxy.cpu_seconds_per_1000_requests,
        3,
        "lower",
        words="CPU per request (the JIT's included)",
    ),
    Figure(
        "cpu_no_jit", "CPU s / 1000 req less the JIT", cpu_without_jit, 3, "lower", words="CPU per request"
    ),
    Figure(
        "cpu_adjusted",
        "CPU s / 1000 req less the JIT, the machine's share out",
        cpu_without_jit,
        3,
        "lower",
        words="CPU per request",
        covariate=generator_cost,
    ),
    Figure("threads", "threads max", lambda r: r.prometheus.threads_live_max, 0, "lower", words="threads"),
    Figure("unparked", "active unparked max", lambda r: r.prometheus.threads_active_unparked_max, 0, "lower"),
    Figure("carriers", "carrier threads max", lambda r: r.prometheus.carriers_max, 0, ""),
    Figure("pinned", "pinned virtual threads", lambda r: r.proxy.virtual_threads_pinned, 0, "lower"),
    Figure(
        "heap", "heap max MiB", lambda r: _mib(r.prometheus.heap_max_bytes), 0, "lower", words="heap (memory)"
    ),
    Figure("conns", "new conns / 1k req", _connections("per_1000_requests"), 1, "lower"),
    Figure("tls_full", "full TLS / 1k req", _connections("full_tls_per_1000_requests"), 1, "lower"),
    Figure(
        "connect_rtt",
        "connect RTT ms / req (modelled)",
        _connections("connect_rtt_ms_per_request"),
        1,
        "lower",
    ),
    Figure("pool_in_use", "pool in use max", lambda r: r.prometheus.pool_in_use_max, 0, ""),
    Figure("pool_idle", "pool idle max", lambda r: r.prometheus.pool_idle_max, 0, ""),
    Figure("time_wait", "TIME_WAIT max", lambda r: r.prometheus.time_wait_max, 0, "lower"),
    Figure(
        "threads_per_flight",
        "active threads / req in flight",
        _connections("threads_per_in_flight"),
        2,
        "lower",
    ),
]
BY_KEY = {f.key: f for f in FIGURES}
# The figures a window gives by itself (a covariate's needs its group: conclusions.covaried): the
# report's table and results.csv.
WINDOW_FIGURES = [f for f in FIGURES if f.covariate is None]

# The figures the first screen answers on, in its order. CPU per request without the JIT's
# compiling where it was seen (`conclusions.Group.verdict_figures`), else with it.
VERDICT_FIGURES = ("rps", "p99", "cpu_no_jit", "threads", "heap")
# The figures a change of release or JDK is judged on; a change of round trip, on latency and what
# explains it (at a fixed rate, rps is the target).
CHANGE_FIGURES = ("rps", "cpu", "cpu_no_jit", "threads", "heap")
CHANGE_FIGURES_BY_DIMENSION = {"RTT": ("p50", "p99", "errors", "cpu", "cpu_no_jit", "threads", "conns")}
# The figures `lab compare` compares, in its order: positive in every window.
COMPARED_FIGURES = ("rps", "p50", "p99", "cpu_no_jit", "cpu", "threads", "heap")
# The figures a study made of `lab run` parts tabulates by default.
STUDY_FIGURES = ("rps", "p50", "p99", "cpu_no_jit", "threads", "heap")

# A window flagged with one of these is left out of its row's figures (the row stays, on the
# windows that are not): the JVM still compiling or a warm-up that did not settle, other work on
# the machine, scrapes Prometheus missed. When fewer than MIN_KEPT windows of a row are free of
# them, the row keeps every window and is flagged as a whole (and named wherever it is left out).
LEFT_OUT = ("not-warm", "machine-busy", "scrapes-missed")
MIN_KEPT = 2
# What the engine itself did: a window with one of these is never left out, whatever else it
# carries (per-call Java's collapse also misses scrapes; leaving those windows out hid it).
ENGINE_FLAGS = ("errors", "unresponsive")
# Windows whose CPU per request is not the proxy's own work: left out where one JVM's windows are
# set against each other (conclusions.later_cost).
NOT_ITS_COST = ("machine-busy", "errors", "unresponsive")


def left_out_window(run: Run) -> bool:
    """A window its row's figures leave out (a flag of LEFT_OUT), unless the engine itself failed
    in it (ENGINE_FLAGS): such a window is the finding, never left out."""
    flags = set(run.verdict.flags)
    return bool(flags & set(LEFT_OUT)) and not flags & set(ENGINE_FLAGS)


def kept_windows(runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """A row's windows split into those its figures are made of and those left out (LEFT_OUT, and
    none of ENGINE_FLAGS): every window when fewer than MIN_KEPT would be kept."""
    left = [r for r in runs if left_out_window(r)]
    free = [r for r in runs if r not in left]
    if left and len(free) >= MIN_KEPT:
        return free, left
    return list(runs), []


def kept_rate(runs: Sequence[Run], load: Load) -> bool:
    """At a fixed rate: whether every window reached it (the equal work the rows are compared at)."""
    return load.model != "rate" or all("target" in r.verdict.flags for r in runs)


def not_compared(figure: Figure, load: Load, *rows: Sequence[Run]) -> list[str]:
    """Why rows (each its kept windows) are not compared with each other on `figure`: `not
    measured` (a row without a value), the flags that make the figure not comparable, or `short of
    its rate` (at a fixed rate, on any figure but rps); empty when they are compared."""
    if any(all(figure.get(r) is None for r in runs) for runs in rows):
        return ["not measured"]
    if flags := sorted(
        {f for runs in rows for r in runs for f in r.verdict.flags if f in figure.not_comparable}
    ):
        return flags
    if figure.key != "rps" and not all(kept_rate(runs, load) for runs in rows):
        return ["short of its rate"]
    return []


def why_not_compared(figure: Figure, load: Load, *rows: Sequence[Run]) -> str:
    """`not measured`, `not compared: errors, not-warm` or `not compared: short of its rate`
    (`not_compared`); "" when the rows are compared on `figure`."""
    reasons = not_compared(figure, load, *rows)
    return (
        ""
        if not reasons
        else reasons[0]
        if reasons == ["not measured"]
        else f"not compared: {', '.join(reasons)}"
    )
