"""How `lab run` measures: a plan of runs, each on a fresh proxy, into results.json.

Per run: a fresh proxy process for the case; Locust (one process for the whole matrix,
driven through its web API) loads it for an unmeasured warm-up (warmup.py), then its stats
are reset and a fixed window is measured. Repeats are interleaved (A B A B, not A A B B) so
that drift of the machine hits every case alike. results.json is rewritten after every run,
so Ctrl-C keeps what finished.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from . import machine, metrics, verdict
from .cases import Case
from .machine import environment
from .parts import nginx
from .parts.loadgen import LocustWeb, WindowStats
from .results import (
    ConnectionFigures,
    Leak,
    LocustFigures,
    MachineFigures,
    Plan,
    PrometheusFigures,
    ProxyFigures,
    Results,
    Run,
    Spec,
    Window,
)
from .warmup import JitClock, warm_up

if TYPE_CHECKING:
    from .backends import Backend

# Seconds after the load stops before threads and open files are compared with the idle proxy's.
LEAK_SETTLE_S = 6
# Seconds a run takes beyond its warm-up and window (a fresh proxy, the last scrape, the leak check).
RUN_OVERHEAD_S = 8
# Seconds the proxy has to answer its /metrics before the run is flagged `unresponsive`.
PROXY_SCRAPE_S = 30


def window_queries(engine: str, lifetime: str, seconds: int) -> dict[str, str]:
    """What `lab run` reads from Prometheus over a window of `seconds` ending at its end: the
    highest gauges, and the counters as Prometheus saw them (beside the exact ones)."""
    sel = f'engine="{engine}", lifetime="{lifetime}"'
    w = f"{seconds}s"
    return {
        "cpu_seconds": f"sum(increase(process_cpu_time_ns_total{{{sel}}}[{w}])) / 1e9",
        "upstream_requests": f"sum(increase(lab_upstream_requests_seconds_count{{{sel}}}[{w}]))",
        "threads_live_max": f"max(max_over_time(jvm_threads_live_threads{{{sel}}}[{w}]))",
        "threads_active_unparked_max": f"max(max_over_time(lab_threads_active_unparked{{{sel}}}[{w}]))",
        "threads_active_unparked_mean": f"avg(avg_over_time(lab_threads_active_unparked{{{sel}}}[{w}]))",
        "heap_max_bytes": f'max_over_time(sum(jvm_memory_used_bytes{{{sel}, area="heap"}})[{w}:1s])',
        "open_fds_max": f"max(max_over_time(process_files_open_files{{{sel}}}[{w}]))",
        "clients_opened": f"sum(increase(lab_clients_opened_total{{{sel}}}[{w}]))",
        "gc_pause_seconds": f"sum(increase(jvm_gc_pause_seconds_sum{{{sel}}}[{w}]))",
        "generator_cpu_max_percent": f"max(max_over_time(locust_cpu_percent[{w}]))",
        "pool_in_use_max": f'max(max_over_time(lab_client_pool_connections{{{sel}, state="in_use"}}[{w}]))',
        "pool_idle_max": f'max(max_over_time(lab_client_pool_connections{{{sel}, state="idle"}}[{w}]))',
        "time_wait_max": f'max(max_over_time(lab_upstream_sockets{{{sel}, state="time_wait"}}[{w}]))',
    }


# The proxy's own counters, read from its /metrics at the window's edges: exact deltas,
# whatever Prometheus managed to scrape from a proxy that is overloaded.
COUNTERS = {
    "upstream_requests": "lab_upstream_requests_seconds_count",
    "cpu_seconds": "process_cpu_time_ns_total",
    "clients_opened": "lab_clients_opened_total",
    "gc_pause_seconds": "jvm_gc_pause_seconds_sum",
}


# The proxy's server timer (Ktor's MicrometerMetrics, buckets on): its latency as it served.
SERVER_TIMER = "ktor_http_server_requests_seconds"


def machine_figures(before: machine.CpuSample, after: machine.CpuSample, seconds: float) -> MachineFigures:
    cpus = machine.cpus()
    seconds = max(seconds, 1e-3)
    busy, lab = after.busy_s - before.busy_s, after.lab_s - before.lab_s
    others = max(0.0, busy - lab)
    return MachineFigures(
        cpus=cpus,
        window_s=round(seconds, 3),
        busy_cores=round(busy / seconds, 3),
        lab_cores=round(lab / seconds, 3),
        others_cores=round(others / seconds, 3),
        others_share=round(others / seconds / cpus, 4),
        steal_share=round((after.steal_s - before.steal_s) / seconds / cpus, 4),
        load1=machine.load_average(),
    )


def counters(samples: metrics.Samples) -> dict[str, float]:
    out = {key: samples.sum(name) for key, name in COUNTERS.items()}
    out["cpu_seconds"] /= 1e9
    return out


# The callers' connections open on the proxy: the load generator's, not the client's to release.
CALLERS_OPEN = "lab_server_connections_open"


def resources(samples: metrics.Samples) -> tuple[float | None, float | None]:
    """The proxy's live threads and open files (for the leak check)."""
    return samples.get("jvm_threads_live_threads"), samples.get("process_files_open_files")


@dataclass
class WindowEdges:
    """What was read at the window's edges: the proxy's /metrics (None where it did not answer),
    Locust's totals, the machine's CPU, the JIT's CPU in the window, and the times."""

    before: metrics.Samples | None
    after: metrics.Samples | None
    stats: WindowStats
    cpu_before: machine.CpuSample
    cpu_after: machine.CpuSample
    cpu_span_s: float  # from the first CPU sample to the last, stalled scrapes included
    jit_s: float | None
    started: float
    ended: float
    edges_s: float
    stopped: float  # time.monotonic() when the load stopped


class ProxyScraper:
    """The proxy's /metrics, or None (and the run flagged) when a collapsed proxy does not answer."""

    def __init__(self, url: str, run: Run):
        self.url, self.run = url, run

    def __call__(self, when: str) -> metrics.Samples | None:
        try:
            return metrics.scrape(self.url, PROXY_SCRAPE_S)
        except requests.RequestException as e:
            self.run.unanswered.append(f"{when}: {type(e).__name__} after up to {PROXY_SCRAPE_S} s")
            return None


def measure(backend: Backend, spec: Spec, plan: Plan) -> Run:
    """One run: a fresh proxy, warm-up, reset, window, then the window's figures."""
    case = spec.case
    network = plan.network_for(case)
    jvm_pid = backend.start_case(case, plan.proxy_env, network)
    idle = metrics.scrape(backend.proxy_metrics_url)  # it has just answered its health check
    run = Run(case.id, case.engine, case.lifetime, spec.scenario, spec.load, spec.repeat)
    run.dimensions = plan.has_dimensions
    run.protocol, run.rtt_ms = case.protocol, case.rtt_ms
    run.network = backend.network_record(network)
    scrape_proxy = ProxyScraper(backend.proxy_metrics_url, run)
    edges = load_and_measure(backend, spec, plan, run, jvm_pid, scrape_proxy)
    record_window(run, edges, idle)
    time.sleep(backend.scrape_seconds + 0.5)  # the window's last scrape (and nginx's log, within 1 s)
    run.prometheus = prometheus_figures(backend.prometheus_url, case, edges)
    run.connections = connection_figures(
        backend.connections(edges.started, edges.ended), run.proxy.upstream_requests, over_tls=case.tls
    )
    time.sleep(max(0.0, LEAK_SETTLE_S - (time.monotonic() - edges.stopped)))
    run.leak = leak_check(idle, scrape_proxy("leak check"))
    explain_connections(run, idle.get("lab_threads_active_unparked"))
    run.verdict = verdict.judge(run)
    return run


def load_and_measure(
    backend: Backend, spec: Spec, plan: Plan, run: Run, jvm_pid: int | None, scrape_proxy: ProxyScraper
) -> WindowEdges:
    """Locust's load on the proxy: the warm-up (recorded in `run`), a reset, the window; the load
    is stopped whatever happens."""
    web = LocustWeb(backend.locust_url)
    load = spec.load
    try:
        web.swarm(
            backend.locust_host,
            load.users,
            load.users,
            scenario=spec.scenario,
            load_model=load.model,
            wait_min=load.wait_min,
            wait_max=load.wait_max,
            target_rps=load.target_rps,
            lab_case=spec.case.id,
        )
        run.warmup = warm_up(lambda seconds: web.rate_over(seconds), plan.warmup_s, jvm_pid)
        jit = JitClock(jvm_pid) if jvm_pid else None
        containers = backend.container_ids()
        cpu_before = machine.cpu_sample(containers)
        edge = cpu_from = time.monotonic()
        web.reset()
        before = scrape_proxy("window start")
        edges_s = time.monotonic() - edge
        started = time.time()
        time.sleep(plan.duration_s)
        edge = time.monotonic()
        stats = web.stats()
        after = scrape_proxy("window end")
        edges_s += time.monotonic() - edge
        cpu_after = machine.cpu_sample(containers)
        cpu_span_s = time.monotonic() - cpu_from
        jit_s = jit.lap() if jit else None
        ended = time.time()
    finally:
        try:
            web.stop()
        except requests.RequestException:
            pass
        stopped = time.monotonic()
    return WindowEdges(
        before, after, stats, cpu_before, cpu_after, cpu_span_s, jit_s, started, ended, edges_s, stopped
    )


def record_window(run: Run, edges: WindowEdges, idle: metrics.Samples) -> None:
    """The window's figures into `run`: Locust's, the proxy's own, the machine's."""
    run.window = Window(
        edges.started, edges.ended, round(edges.ended - edges.started, 3), round(edges.edges_s, 3)
    )
    run.locust = LocustFigures.of(edges.stats)
    if edges.before is not None and edges.after is not None:
        run.proxy = proxy_figures(edges.before, edges.after)
    else:
        run.proxy = ProxyFigures(settings=idle.labels("lab_proxy_info"))
    if edges.jit_s is not None:
        run.proxy.jit_cpu_seconds_in_window = round(edges.jit_s, 2)
    run.ktor, run.java = run.proxy.settings.get("ktor_version"), run.proxy.settings.get("java_version")
    run.machine = machine_figures(edges.cpu_before, edges.cpu_after, edges.cpu_span_s)


def prometheus_figures(prometheus_url: str, case: Case, edges: WindowEdges) -> PrometheusFigures:
    window_s = max(1, round(edges.ended - edges.started))
    return PrometheusFigures(
        **{
            name: metrics.scalar(prometheus_url, q, edges.ended)
            for name, q in window_queries(case.engine, case.lifetime, window_s).items()
        }
    )


def connection_figures(
    new: list[nginx.Connection], requests: float, over_tls: bool | None = None
) -> ConnectionFigures:
    """New upstream connections over the window (nginx's log) and per 1,000 of the proxy's upstream
    requests in it. Full TLS handshakes per 1,000 for a case over TLS (`over_tls`; when not given,
    when any connection was): 0 when no connection was new, not "none"."""
    tls = [c for c in new if c.tls_version]
    figures = ConnectionFigures(
        new=len(new),
        tls=len(tls),
        full_tls_handshakes=sum(1 for c in tls if not c.resumed),
        by_protocol=dict(Counter(c.protocol for c in new)),
        by_tls_version=dict(Counter(c.tls_version for c in tls)),
    )
    if requests:
        figures.per_1000_requests = round(figures.new / requests * 1000, 2)
        if over_tls or (over_tls is None and tls):
            figures.full_tls_per_1000_requests = round(figures.full_tls_handshakes / requests * 1000, 2)
    return figures


# Below this many requests in flight on average, threads per request in flight says nothing.
IN_FLIGHT_MIN = 1.0


def explain_connections(run: Run, unparked_idle: float | None) -> None:
    """The figures that explain a row's connections, into `run.connections`: requests in flight on
    average (Little's law: the seconds the proxy spent serving, over the window), threads at work
    per request in flight (active unparked threads on average over the window, less the idle
    proxy's `unparked_idle`: a thread blocked in a read is unparked, one idle in a pool is parked),
    and the round trips the network does not make for a new connection (new connections per
    request x RTT: Toxiproxy's TCP handshake is local)."""
    c = run.connections
    if c is None:
        return
    c.threads_unparked_idle = unparked_idle
    if run.proxy.server_seconds is not None and run.window.seconds:
        c.in_flight_mean = round(run.proxy.server_seconds / run.window.seconds, 2)
    active = run.prometheus.threads_active_unparked_mean
    if (
        c.in_flight_mean
        and c.in_flight_mean >= IN_FLIGHT_MIN
        and active is not None
        and unparked_idle is not None
    ):
        c.threads_per_in_flight = round(max(0.0, active - unparked_idle) / c.in_flight_mean, 2)
    if c.per_1000_requests is not None:
        c.connect_rtt_ms_per_request = round(c.per_1000_requests / 1000 * run.rtt_ms, 2)


def leak_check(idle: metrics.Samples, settled: metrics.Samples | None) -> Leak:
    """The proxy's threads and open files idle before the load and LEAK_SETTLE_S after it."""
    threads_idle, files_idle = resources(idle)
    threads_after, files_after = resources(settled) if settled is not None else (None, None)
    callers = idle.get(CALLERS_OPEN), settled.get(CALLERS_OPEN) if settled is not None else None
    return Leak(LEAK_SETTLE_S, threads_idle, threads_after, files_idle, files_after, *callers)


def proxy_figures(before: metrics.Samples, after: metrics.Samples) -> ProxyFigures:
    """The proxy's own figures over the window, from its /metrics at the window's edges."""
    edges = counters(before), counters(after)
    proxy = ProxyFigures(
        **{key: round(edges[1][key] - edges[0][key], 6) for key in COUNTERS},
        settings=after.labels("lab_proxy_info"),
    )
    if proxy.upstream_requests:
        proxy.cpu_seconds_per_1000_requests = proxy.cpu_seconds / proxy.upstream_requests * 1000
    proxy.server_seconds = round(after.sum(f"{SERVER_TIMER}_sum") - before.sum(f"{SERVER_TIMER}_sum"), 3)
    served = metrics.delta(metrics.buckets(before, SERVER_TIMER), metrics.buckets(after, SERVER_TIMER))
    proxy.server_requests = served.get(float("inf"))
    for q in (50, 95, 99):
        seconds = metrics.quantile(served, q / 100)
        setattr(proxy, f"server_p{q}_ms", None if seconds is None else round(seconds * 1000, 2))
    return proxy


class Progress:
    """One line per run (and a live line on a terminal) with an ETA from the runs so far."""

    def __init__(self, total: int, planned_s: float):
        self.total, self.done, self.planned_s = total, 0, planned_s
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def eta(self) -> float:
        left = self.total - self.done
        if self.done:
            return left * (time.monotonic() - self.started) / self.done
        return left * self.planned_s

    def show(self, what: str) -> None:
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        line = f"[{bar}] {self.done}/{self.total}  {what}  ETA {format_seconds(self.eta())}"
        if self.tty:
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def finish_one(self, summary: str) -> None:
        self.done += 1
        if self.tty:
            print("\r\033[K", end="", file=sys.stderr)
        print(f"  {summary}", flush=True)


def format_seconds(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def planned_seconds(plan: Plan) -> float:
    """The most a plan takes: every run's warm-up limit, window and overhead."""
    return len(plan.runs()) * (plan.warmup_s + plan.duration_s + RUN_OVERHEAD_S)


def summary_line(run: Run) -> str:
    lc = run.locust
    flags = ", ".join(run.verdict.flags) or "capacity"
    cpu = run.proxy.cpu_seconds_per_1000_requests
    cpu_text = f"{cpu:.2f} CPU s/1000" if cpu is not None else "CPU n/a"
    return (
        f"{run.variant:<18} {run.scenario:<12} {run.load.label:<16} #{run.repeat}  "
        f"{lc.rps:8.1f} rps  p50 {fmt(lc.p50_ms)} p99 {fmt(lc.p99_ms)} ms  "
        f"fail {lc.failures}  {cpu_text}  [{flags}]"
    )


def fmt(v) -> str:
    return "-" if v is None else f"{v:g}"


def run_plan(plan: Plan, backend: Backend, out_dir: Path) -> Results:
    """Runs the plan, writing out_dir/results.json after each run; returns the results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results(
        plan=plan,
        backend=backend.describe(),
        environment=environment(),
        started=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    specs = plan.runs()
    progress = Progress(len(specs), plan.warmup_s + plan.duration_s + RUN_OVERHEAD_S)
    try:
        for spec in specs:
            progress.show(spec.title())
            run = measure(backend, spec, plan)
            results.runs.append(run)
            results.write(out_dir)
            progress.finish_one(summary_line(run))
    except KeyboardInterrupt:
        results.interrupted = True
        print("\nlab run: interrupted; keeping the runs that finished", file=sys.stderr)
    finally:
        results.finished = datetime.now(UTC).isoformat(timespec="seconds")
        results.wall_seconds = round(time.monotonic() - progress.started, 1)
        results.write(out_dir)
    return results
