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
from datetime import UTC, datetime
from pathlib import Path

import requests

from . import machine, metrics, verdict
from .cases import split_case
from .machine import environment
from .parts.loadgen import LocustWeb
from .results import (
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
        "heap_max_bytes": f'max_over_time(sum(jvm_memory_used_bytes{{{sel}, area="heap"}})[{w}:1s])',
        "open_fds_max": f"max(max_over_time(process_files_open_files{{{sel}}}[{w}]))",
        "clients_opened": f"sum(increase(lab_clients_opened_total{{{sel}}}[{w}]))",
        "gc_pause_seconds": f"sum(increase(jvm_gc_pause_seconds_sum{{{sel}}}[{w}]))",
        "generator_cpu_max_percent": f"max(max_over_time(locust_cpu_percent[{w}]))",
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


def resources(samples: metrics.Samples) -> tuple[float | None, float | None]:
    """The proxy's live threads and open files (for the leak check)."""
    return samples.get("jvm_threads_live_threads"), samples.get("process_files_open_files")


def measure(backend, spec: Spec, plan: Plan) -> Run:
    """One run: fresh proxy, warm-up, reset, window, then the window's figures."""
    lifetime, engine = split_case(spec.case)
    load = spec.load
    jvm_pid = backend.start_case(spec.case, plan.proxy_env, ktor=spec.ktor, java=spec.java)
    idle = metrics.scrape(backend.proxy_metrics_url)  # it has just answered its health check
    threads_idle, files_idle = resources(idle)
    web = LocustWeb(backend.locust_url)
    run = Run(spec.case, engine, lifetime, spec.scenario, load, spec.repeat)

    def scrape_proxy(when: str) -> metrics.Samples | None:
        """The proxy's /metrics, or None (and the run flagged) when a collapsed proxy does not answer."""
        try:
            return metrics.scrape(backend.proxy_metrics_url, PROXY_SCRAPE_S)
        except requests.RequestException as e:
            run.unanswered.append(f"{when}: {type(e).__name__} after up to {PROXY_SCRAPE_S} s")
            return None

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
            lab_case=spec.case,
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
        cpu_span_s = time.monotonic() - cpu_from  # with the edges: a stalled scrape is inside it
        jit_in_window = jit.lap() if jit else None
        ended = time.time()
    finally:
        try:
            web.stop()
        except requests.RequestException:
            pass
        stopped = time.monotonic()
    elapsed = max(stats["now"] - stats["start_time"], 1e-3)
    run.window = Window(started, ended, round(ended - started, 3), round(edges_s, 3))
    run.locust = LocustFigures(
        requests=stats["requests"],
        failures=stats["failures"],
        rps=stats["requests"] / elapsed,
        **{
            k: stats[k]
            for k in (
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "max_ms",
                "avg_ms",
                "users",
                "workers",
                "target_rps",
                "cpu_peak_percent",
                "saturated",
                "settings",
                "errors",
            )
        },
    )
    if before is not None and after is not None:
        run.proxy = proxy_figures(before, after)
    else:
        run.proxy = ProxyFigures(settings=idle.labels("lab_proxy_info"))
    proxy = run.proxy
    if jit_in_window is not None:
        proxy.jit_cpu_seconds_in_window = round(jit_in_window, 2)
    run.ktor, run.java = proxy.settings.get("ktor_version"), proxy.settings.get("java_version")
    run.dimensions = bool(plan.ktor or plan.java)
    run.machine = machine_figures(cpu_before, cpu_after, cpu_span_s)
    time.sleep(backend.scrape_seconds + 0.5)  # the window's last scrape
    window_s = max(1, round(ended - started))
    run.prometheus = PrometheusFigures(
        **{
            name: metrics.scalar(backend.prometheus_url, q, ended)
            for name, q in window_queries(engine, lifetime, window_s).items()
        }
    )
    time.sleep(max(0.0, LEAK_SETTLE_S - (time.monotonic() - stopped)))
    settled = scrape_proxy("leak check")
    threads_after, files_after = resources(settled) if settled is not None else (None, None)
    run.leak = Leak(LEAK_SETTLE_S, threads_idle, threads_after, files_idle, files_after)
    run.verdict = verdict.judge(run)
    return run


def proxy_figures(before: metrics.Samples, after: metrics.Samples) -> ProxyFigures:
    """The proxy's own figures over the window, from its /metrics at the window's edges."""
    edges = counters(before), counters(after)
    proxy = ProxyFigures(
        **{key: round(edges[1][key] - edges[0][key], 6) for key in COUNTERS},
        settings=after.labels("lab_proxy_info"),
    )
    if proxy.upstream_requests:
        proxy.cpu_seconds_per_1000_requests = proxy.cpu_seconds / proxy.upstream_requests * 1000
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


def run_plan(plan: Plan, backend, out_dir: Path) -> Results:
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
            dims = (f" ktor {spec.ktor}" if spec.ktor else "") + (f" jdk {spec.java}" if spec.java else "")
            progress.show(f"{spec.case}{dims} {spec.scenario} {spec.load.label} #{spec.repeat}")
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
