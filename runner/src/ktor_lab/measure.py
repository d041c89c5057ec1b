"""How `lab run` measures: a plan of windows, on proxies warmed once, into results.json.

Natively every proxy of the plan (a case, its forks, an A/A pair's two copies) is started first
and stays up. Locust (one process for the whole matrix, driven through its web API) loads one
proxy at a time: the first time a proxy meets a scenario and load, for an unmeasured warm-up
(warmup.py); after that, a warm proxy that idled while the others were measured gets a short
settle. Then Locust's stats are reset and a fixed window is measured. Windows are interleaved
round by round (A B C A B C, not A A B B), so that drift of the machine hits every row alike;
a proxy's leak check is taken when it has idled after its window. With a fresh proxy per window
(`--fresh`, and the compose backend) each window warms its own proxy again. results.json is
rewritten after every window (on kept proxies within the next one's settle, `Finish`), so Ctrl-C
keeps what finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import requests

from . import conclusions, machine, metrics, rules, verdict
from .cases import DIMENSIONS
from .machine import environment
from .parts import nginx
from .parts.loadgen import LocustWeb, WindowStats
from .plan import WARM_FIRST_SCENARIO, Load, Plan, ProxySpec, Spec
from .processes import wait_until
from .results import (
    ConnectionFigures,
    Leak,
    LocustFigures,
    MachineFigures,
    PrometheusFigures,
    ProxyFigures,
    ProxyLog,
    Race,
    Results,
    Run,
    Window,
)
from .warmup import JitClock, Warmup, warm_up

if TYPE_CHECKING:
    from .backends import Backend, ProxyHandle

# Seconds after the load stops before threads and open files are compared with the idle proxy's.
LEAK_SETTLE_S = 6
# Seconds a run takes beyond its warm-up and window (a fresh proxy, the last scrape, the leak check).
RUN_OVERHEAD_S = 8
# Seconds a window on a warm proxy takes beyond its settle and its measured seconds (Locust's
# start and stop, the first scrape of the proxy: the last scrape of the window before and
# Prometheus' queries are waited for within the settle, `Finish`, as long as a scrape interval
# fits in it: kept_window_seconds adds what does not, Swarm's 5 s).
WINDOW_OVERHEAD_S = 2
# Prometheus' scrape interval in lab run natively (backends.NativeBackend's).
SCRAPE_S = 2
# Seconds nginx may take to write a connection to its log (its buffer is flushed every 1 s).
NGINX_LOG_S = 1.5
# Seconds the proxy has to answer its /metrics before the run is flagged `unresponsive`.
PROXY_SCRAPE_S = 30
# Proxies up at once natively (each up to -Xmx512m of heap and its threads): the default matrix's
# 9 a fork fit; a larger plan is measured in groups of this many (`batches`).
MAX_PROXIES_UP = 12
# Seconds a window waits for Prometheus to scrape the proxy it was switched to (at its next scrape:
# stack.Stack.scrape_only); a proxy slow to answer its /metrics takes longer.
SCRAPE_WAIT_S = 20


def window_queries(instance: str, seconds: int) -> dict[str, str]:
    """What `lab run` reads from Prometheus over a window of `seconds` ending at its end, of the
    proxy at `instance` (host:port: several proxies of one case may be up): the highest gauges,
    and the counters as Prometheus saw them (beside the exact ones)."""
    sel = f'job="proxy", instance="{instance}"'
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
        # Virtual threads' carriers (the scheduler's platform threads; none without virtual threads).
        "carriers_max": f"max(max_over_time(lab_threads_carriers{{{sel}}}[{w}]))",
        # Scrapes of the proxy in the window, tried and answered in time: a counter's increase needs
        # two answered (an overloaded proxy's /metrics can take longer than the scrape timeout).
        "scrapes_tried": f"sum(count_over_time(up{{{sel}}}[{w}]))",
        "scrapes_answered": f"sum(sum_over_time(up{{{sel}}}[{w}]))",
    }


# The proxy's own counters, read from its /metrics at the window's edges: exact deltas,
# whatever Prometheus managed to scrape from a proxy that is overloaded.
COUNTERS = {
    "upstream_requests": "lab_upstream_requests_seconds_count",
    "cpu_seconds": "process_cpu_time_ns_total",
    "clients_opened": "lab_clients_opened_total",
    "gc_pause_seconds": "jvm_gc_pause_seconds_sum",
}


# Pinned virtual threads the proxy counted (its JFR stream of jdk.VirtualThreadPinned).
PINNED = "lab_virtual_threads_pinned_total"
# The proxy's server timer (Ktor's MicrometerMetrics, buckets on): its latency as it served.
SERVER_TIMER = "ktor_http_server_requests_seconds"
UPSTREAM_TIMER = "lab_upstream_requests_seconds"


def machine_figures(before: machine.CpuSample, after: machine.CpuSample, seconds: float) -> MachineFigures:
    cpus = machine.cpus()
    seconds = max(seconds, 1e-3)
    busy, lab = after.busy_s - before.busy_s, after.lab_s - before.lab_s
    others = max(0.0, busy - lab)
    generator = None
    if before.generator_s is not None and after.generator_s is not None:
        generator = after.generator_s - before.generator_s
    return MachineFigures(
        cpus=cpus,
        window_s=round(seconds, 3),
        busy_cores=round(busy / seconds, 3),
        lab_cores=round(lab / seconds, 3),
        others_cores=round(others / seconds, 3),
        others_share=round(others / seconds / cpus, 4),
        steal_share=round((after.steal_s - before.steal_s) / seconds / cpus, 4),
        load1=machine.load_average(),
        # None when a Locust process ended inside the window (its CPU left the second sum)
        generator_cores=round(generator / seconds, 4) if generator is not None and generator >= 0 else None,
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
    # The proxy's sockets to the upstream put in TIME_WAIT during the window (None: not readable).
    time_wait: int | None = None
    # Its threads' voluntary context switches in the window, and its CPUs (natively; None, "": not seen).
    switches: int | None = None
    cpus: str = ""


class ProxyScraper:
    """The proxy's /metrics, or None (and the run flagged) when a collapsed proxy does not answer."""

    def __init__(self, backend: Backend, proxy: ProxyHandle, run: Run):
        self.backend, self.proxy, self.run = backend, proxy, run

    def __call__(self, when: str) -> metrics.Samples | None:
        try:
            return self.backend.proxy_metrics(self.proxy, PROXY_SCRAPE_S)
        except requests.RequestException as e:
            self.run.unanswered.append(f"{when}: {type(e).__name__} after up to {PROXY_SCRAPE_S} s")
            return None


@dataclass
class Live:
    """A proxy of the plan while it is up: the row it measures for, where it answers, what it held
    idle before any load, its warm-up per scenario and load, and its last window, whose leak check
    waits until the proxy has idled at least LEAK_SETTLE_S (natively while the others are measured)."""

    spec: ProxySpec
    proxy: ProxyHandle
    idle: metrics.Samples
    warmups: dict[tuple[str, str], Warmup] = field(default_factory=dict)
    # Its warm-up at the plan's warm_first load (once per proxy, before its first other warm-up).
    first: Warmup | None = None
    pending: Run | None = None
    stopped: float = 0.0  # time.monotonic() when its last window's load stopped
    log_seen: int = 0  # how much of its log (characters) earlier windows' counts have read


def start_live(backend: Backend, p: ProxySpec, plan: Plan, keep: bool) -> Live:
    """A proxy for `p`, and its /metrics idle (it has just answered its health check)."""
    proxy = backend.start_case(p.case, plan.proxy_env, plan.network_for(p.case), keep=keep)
    return Live(p, proxy, backend.proxy_metrics(proxy))


class Finish:
    """What is left of a window once its load has stopped: the wait for its last scrape and for
    nginx's log, Prometheus' figures over it, its connections and its verdict (`finish_window`).
    Done once, when called: by `measure` of the next window while that proxy settles or warms
    (never inside a measured window), so that the 1.5-2 s these wait for are not added to the
    run's; at once when nothing follows. `recorded` is given the run once done, or interrupted
    (its Prometheus figures then marked not read: verdict.record_flags): lab run records it there,
    within the next settle."""

    def __init__(
        self,
        backend: Backend,
        live: Live,
        run: Run,
        edges: WindowEdges,
        recorded: Callable[[Live, Run], None] = lambda live, run: None,
    ):
        self.backend, self.live, self.run, self.edges, self.recorded = backend, live, run, edges, recorded
        self.done = False

    def __call__(self) -> Run:
        if not self.done:
            self.done = True  # not again, even when interrupted: the run keeps what it has
            self.run.prometheus.scraped_after_end = False  # until read
            try:
                finish_window(self.backend, self.live, self.run, self.edges)
            except BaseException:
                with contextlib.suppress(Exception):  # the error raised stays the one that stopped it
                    self.run.verdict = verdict.judge(self.run)  # with what it has
                raise
            finally:
                self.recorded(self.live, self.run)
        return self.run


def measure(
    backend: Backend,
    live: Live,
    spec: Spec,
    plan: Plan,
    others: list[Live] = (),
    finishing: Finish | None = None,
    recorded: Callable[[Live, Run], None] = lambda live, run: None,
) -> Finish:
    """One window on `live`: its warm-up the first time it meets this scenario and load (else a
    short settle after its idle), a reset, the window; returns what is left to do of the window's
    figures (`Finish`). `finishing`, the window before's, is done once this proxy's load has
    started and before its window: Prometheus scrapes both proxies until then. `others` are the
    proxies idle meanwhile (their CPU in the window is recorded). `recorded`: the Finish's."""
    case = spec.case
    backend.use(live.proxy)
    backend.scrape(live.proxy, *([finishing.live.proxy] if finishing is not None else []))
    switched = time.time()
    finish_leak_check(backend, live)  # its previous window's, now that it has idled
    run = Run(case.id, case.engine, case.lifetime, spec.scenario, spec.load, spec.repeat)
    run.copy, run.fork = spec.copy, spec.fork
    run.dimensions = plan.has_dimensions
    run.dims = {d.field: d.value_of(case) for d in DIMENSIONS if not d.reported}
    run.network = backend.network_record(live.proxy.network)
    scrape_proxy = ProxyScraper(backend, live.proxy, run)

    def meanwhile() -> None:
        if finishing is not None and not finishing.done:
            finishing()
            backend.scrape(live.proxy)  # the finished window's proxy is left alone again

    edges = load_and_measure(backend, live, spec, plan, run, scrape_proxy, others, switched, meanwhile)
    record_window(run, edges, live.idle)
    run.verdict = verdict.judge(run)  # again with the rest of its figures (Finish)
    live.pending, live.stopped = run, edges.stopped
    return Finish(backend, live, run, edges, recorded)


def finish_window(backend: Backend, live: Live, run: Run, edges: WindowEdges) -> None:
    """A window's figures that wait for its last scrape and nginx's log, and its verdict."""
    seen = last_scrape(backend, live.proxy.instance, edges.ended)
    run.prometheus = prometheus_figures(backend.prometheus_url, live.proxy.instance, edges, backend.auth)
    run.prometheus.scraped_after_end = seen  # until here, not read (Finish): a failed query says so
    if edges.time_wait is not None:
        # The proxy's own gauge counts every socket to the upstream's port that closed since it
        # started; the other proxies up (natively they share the host's table) close theirs in
        # their windows. Those the window added are this proxy's: the others idle meanwhile.
        run.prometheus.time_wait_max = edges.time_wait
    if (new := backend.connections(edges.started, edges.ended)) is not None:  # None: not readable
        run.connections = connection_figures(new, run.proxy.upstream_requests, over_tls=live.spec.case.tls)
    explain_connections(run, live.idle.get("lab_threads_active_unparked"))
    run.verdict = verdict.judge(run)


def last_scrape(backend: Backend, instance: str, ended: float) -> bool:
    """Waits until Prometheus has scraped the proxy once after the window's end (`ended`, seconds
    since the epoch), so that every sample inside the window is stored, and until nginx has written
    the window's connections to its log (within NGINX_LOG_S). The other targets' samples inside the
    window were stored by their own scrapes, each done before this one. A proxy that does not
    answer its scrape is waited for about two scrape intervals: False then (its run is flagged)."""
    seen = wait_until(
        lambda: metrics.scraped_since(backend.prometheus_url, instance, ended, backend.auth),
        timeout=2 * backend.scrape_seconds + 1,
        interval=0.25,
    )
    time.sleep(max(0.0, NGINX_LOG_S - (time.time() - ended)))
    return bool(seen)


def finish_leak_check(backend: Backend, live: Live) -> None:
    """The leak check of `live`'s last window: its threads and open files once it has idled at
    least LEAK_SETTLE_S (waiting for the rest), against the proxy's before any load; and the
    exceptions the proxy logged since its window before (from its start for the first)."""
    run, live.pending = live.pending, None
    if run is None:
        return
    time.sleep(max(0.0, LEAK_SETTLE_S - (time.monotonic() - live.stopped)))
    settled = ProxyScraper(backend, live.proxy, run)("leak check")
    run.leak = leak_check(live.idle, settled, time.monotonic() - live.stopped)
    text = backend.proxy_log(live.proxy)
    run.proxy_log = proxy_log(text[live.log_seen :] if text is not None else None)
    live.log_seen = len(text) if text is not None else live.log_seen
    run.verdict = verdict.judge(run)


def load_and_measure(
    backend: Backend,
    live: Live,
    spec: Spec,
    plan: Plan,
    run: Run,
    scrape_proxy: ProxyScraper,
    others: list[Live] = (),
    switched: float = 0.0,
    meanwhile: Callable[[], None] = lambda: None,
) -> WindowEdges:
    """Locust's load on the proxy: the warm-up or settle (recorded in `run`), a reset, the window;
    the load is stopped whatever happens. The window starts once Prometheus has scraped this proxy
    since `switched` (when it was made the one scraped), so its figures cover the whole window.
    `meanwhile` (the window before's `Finish`) is done once the load has started, within the settle
    or the warm-up's first window, and before the window in any case."""
    web = LocustWeb(backend.locust_url, backend.auth)
    load = spec.load
    pid = live.proxy.pid
    idle_pids = [o.proxy.pid for o in others if o.proxy.pid]
    cell = (spec.scenario, load.label)
    try:
        if cell not in live.warmups and needs_warm_first(live, spec, plan):
            live.first = warm_first(web, backend.locust_host(live.proxy), plan, spec, pid, meanwhile)
        swarm(web, backend.locust_host(live.proxy), spec.scenario, load, spec.case.id)
        if cell not in live.warmups:
            live.warmups[cell] = warm_up(
                lambda seconds: web.rate_over(seconds, meanwhile),
                plan.warmup_s,
                pid,
                expected=answered_rate(live.first, spec),
            )
            if live.first is not None:
                live.warmups[cell] = with_first(live.warmups[cell], live.first, plan)
            run.after = "warm-up" if backend.keeps_proxies and not plan.fresh else "fresh"
        else:
            run.after, run.idle_s = "idle", round(time.monotonic() - live.stopped, 1)
            if plan.settle_s:  # and what the users take to start beyond the usual second
                settle_s = plan.settle_s + math.ceil(load.ramp_s - 1)
                run.settle_rps = round(web.rate_over(settle_s, meanwhile), 1)
        meanwhile()  # done by now, unless no settle or warm-up came before
        run.warmup = live.warmups[cell]
        waited = time.monotonic()
        seen = wait_until(
            lambda: metrics.scraped_since(
                backend.prometheus_url, live.proxy.instance, switched, backend.auth
            ),
            timeout=SCRAPE_WAIT_S,
            interval=0.5,
        )
        run.scrape_wait_s = round(time.monotonic() - waited, 1)
        if not seen:
            run.unanswered.append(
                f"Prometheus had not scraped the proxy {SCRAPE_WAIT_S} s after it was asked to"
            )
        jit = JitClock(pid) if pid else None
        switches = machine.thread_context_switches(pid) if pid else None
        port = upstream_port(live.idle)
        waiting = machine.sockets_in_time_wait(pid, port) if pid and port else None
        containers = backend.container_ids()
        cpu_before = machine.cpu_sample(containers)
        idle_before = machine.processes_cpu_seconds(idle_pids)
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
        if idle_pids:
            run.idle_proxies = len(idle_pids)
            used = machine.processes_cpu_seconds(idle_pids) - idle_before
            run.idle_proxies_cores = round(used / max(cpu_span_s, 1e-3), 3)
        jit_s = jit.lap() if jit else None
        if switches is not None:
            switches = machine.switches_between(switches, machine.thread_context_switches(pid))
        placed = machine.placed(pid) if pid else ""
        time_wait = None
        if waiting is not None and (now := machine.sockets_in_time_wait(pid, port)) is not None:
            time_wait = machine.new_in_time_wait(waiting, now)
        ended = time.time()
    finally:
        try:
            web.stop()
        except requests.RequestException:
            pass
        stopped = time.monotonic()
    return WindowEdges(
        before, after, stats, cpu_before, cpu_after, cpu_span_s, jit_s, started, ended, edges_s, stopped,
        time_wait, switches, placed,
    )  # fmt: skip


def upstream_port(samples: metrics.Samples) -> int | None:
    """The port the proxy dials (its `upstream` setting; Toxiproxy's when a network is on)."""
    upstream = samples.labels("lab_proxy_info").get("upstream")
    if not upstream:
        return None
    url = urlsplit(upstream)
    try:
        return url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None


def swarm(web: LocustWeb, host: str, scenario: str, load: Load, case_id: str) -> None:
    """Locust's load at `load` on `scenario` through the proxy at `host`."""
    web.swarm(
        host,
        load.users,
        load.users / load.ramp_s,
        scenario=scenario,
        load_model=load.model,
        wait_min=load.wait_min,
        wait_max=load.wait_max,
        target_rps=load.target_rps,
        lab_case=case_id,
    )


def needs_warm_first(live: Live, spec: Spec, plan: Plan) -> bool:
    """The plan warms first, this proxy has not been, and its load is not that warm-up itself."""
    first = plan.warm_first
    if first is None or live.first is not None or plan.warmup_s == 0:
        return False
    return (spec.scenario, spec.load.label) != (WARM_FIRST_SCENARIO, first.label)


def warm_first(
    web: LocustWeb, host: str, plan: Plan, spec: Spec, pid: int | None, meanwhile: Callable[[], None]
) -> Warmup:
    """The proxy warmed by the rule at the plan's warm_first load on WARM_FIRST_SCENARIO (capacity:
    the JIT compiles the proxy's path in 25-60 s), then Locust stopped for the measured load.
    `meanwhile` is done once that load has started, within the rule's first window."""
    assert plan.warm_first is not None
    swarm(web, host, WARM_FIRST_SCENARIO, plan.warm_first, spec.case.id)
    try:
        return warm_up(lambda seconds: web.rate_over(seconds, meanwhile), plan.warmup_s, pid)
    finally:
        web.stop()


def answered_rate(first: Warmup | None, spec: Spec) -> float:
    """The rate the proxy is known to answer at `spec`'s load: at a fixed rate, its target, or the
    best the warm-up at capacity (`first`) saw where lower, when that ran on the same scenario; 0
    when unknown (no such warm-up, another scenario, or a load without a target)."""
    if first is None or not first.window_rates or spec.scenario != WARM_FIRST_SCENARIO:
        return 0.0
    if spec.load.model != "rate" or not spec.load.target_rps:
        return 0.0
    return min(max(first.window_rates), spec.load.target_rps)


def with_first(w: Warmup, first: Warmup, plan: Plan) -> Warmup:
    """The warm-up at the measured load, recording the warm-up at capacity before it."""
    assert plan.warm_first is not None
    return dataclasses.replace(
        w,
        first_load=plan.warm_first.label,
        first_scenario=WARM_FIRST_SCENARIO,
        first_seconds=first.seconds,
        first_end=first.end,
        first_window_rates=first.window_rates,
        first_window_jit_s=first.window_jit_s,
    )


def record_window(run: Run, edges: WindowEdges, idle: metrics.Samples) -> None:
    """The window's figures into `run`: Locust's, the proxy's own, the machine's."""
    run.window = Window(
        edges.started, edges.ended, round(edges.ended - edges.started, 3), round(edges.edges_s, 3)
    )
    run.locust = LocustFigures.from_window(edges.stats)
    if edges.before is not None and edges.after is not None:
        run.proxy = proxy_figures(edges.before, edges.after)
    else:
        run.proxy = ProxyFigures(settings=idle.labels("lab_proxy_info"))
    if edges.jit_s is not None:
        run.proxy.jit_cpu_seconds_in_window = round(edges.jit_s, 2)
    if edges.switches is not None and run.proxy.upstream_requests:
        run.proxy.switches_per_request = round(edges.switches / run.proxy.upstream_requests, 2)
    run.proxy.cpus = edges.cpus
    run.ktor, run.java = run.proxy.settings.get("ktor_version"), run.proxy.settings.get("java_version")
    run.machine = machine_figures(edges.cpu_before, edges.cpu_after, edges.cpu_span_s)


def prometheus_figures(
    prometheus_url: str, instance: str, edges: WindowEdges, auth: tuple[str, str] | None = None
) -> PrometheusFigures:
    window_s = max(1, round(edges.ended - edges.started))
    return PrometheusFigures(
        **{
            name: metrics.scalar(prometheus_url, q, edges.ended, auth)
            for name, q in window_queries(instance, window_s).items()
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
        c.connect_rtt_ms_per_request = round(c.per_1000_requests / 1000 * run.dim("rtt_ms"), 2)


# A Java exception's first line ("Exception in thread ..." when nothing caught it), then a frame.
EXCEPTION_LINE = re.compile(r'^(?:Exception in thread "[^"]*" )?([A-Za-z_$][\w$]*(?:\.[\w$]+)+)(?::.*)?$')
FRAME_LINE = re.compile(r"^\s+at \S")


def proxy_log(text: str | None) -> ProxyLog | None:
    """The exceptions in the proxy's log with their stack traces (an exception line followed by a
    frame; "Caused by:" is part of the one before), by class; None when the log could not be read."""
    if text is None:
        return None
    lines = text.splitlines()
    found = ProxyLog()
    for i, line in enumerate(lines[:-1]):
        m = EXCEPTION_LINE.match(line)
        if m is None or not FRAME_LINE.match(lines[i + 1]):
            continue
        found.exceptions += 1
        found.kinds[m.group(1)] = found.kinds.get(m.group(1), 0) + 1
        if found.first is None:
            logged = lines[i - 1] if i and not FRAME_LINE.match(lines[i - 1]) else ""
            found.first = " / ".join(s.strip()[:200] for s in (logged, line) if s)
    return found


def leak_check(
    idle: metrics.Samples, settled: metrics.Samples | None, settle_s: float = LEAK_SETTLE_S
) -> Leak:
    """The proxy's threads and open files idle before any load and `settle_s` after the load stopped."""
    threads_idle, files_idle = resources(idle)
    threads_after, files_after = resources(settled) if settled is not None else (None, None)
    callers = idle.get(CALLERS_OPEN), settled.get(CALLERS_OPEN) if settled is not None else None
    return Leak(round(settle_s, 1), threads_idle, threads_after, files_idle, files_after, *callers)


def proxy_figures(before: metrics.Samples, after: metrics.Samples) -> ProxyFigures:
    """The proxy's own figures over the window, from its /metrics at the window's edges."""
    edges = counters(before), counters(after)
    proxy = ProxyFigures(
        **{key: round(edges[1][key] - edges[0][key], 6) for key in COUNTERS},
        settings=after.labels("lab_proxy_info"),
    )
    # Virtual threads pinned to their carrier (JFR's jdk.VirtualThreadPinned, counted by the proxy
    # when it runs its client on virtual threads; None for a proxy that does not count them).
    if (pinned := after.get(PINNED)) is not None:
        proxy.virtual_threads_pinned = pinned - (before.get(PINNED) or 0.0)
    if proxy.upstream_requests:
        proxy.cpu_seconds_per_1000_requests = proxy.cpu_seconds / proxy.upstream_requests * 1000
    proxy.server_seconds = round(after.sum(f"{SERVER_TIMER}_sum") - before.sum(f"{SERVER_TIMER}_sum"), 3)
    served = metrics.delta(metrics.buckets(before, SERVER_TIMER), metrics.buckets(after, SERVER_TIMER))
    proxy.server_requests = served.get(float("inf"))
    proxy.server_buckets = metrics.own_counts(served)
    for q in (50, 95, 99):
        seconds = metrics.quantile(served, q / 100)
        setattr(proxy, f"server_p{q}_ms", None if seconds is None else round(seconds * 1000, 3))
    # The engine's own share: the upstream exchanges that succeeded, until their body was relayed.
    called = metrics.delta(
        metrics.buckets(before, UPSTREAM_TIMER, outcome="success"),
        metrics.buckets(after, UPSTREAM_TIMER, outcome="success"),
    )
    proxy.upstream_buckets = metrics.own_counts(called)
    for q in (50, 99):
        seconds = metrics.quantile(called, q / 100)
        setattr(proxy, f"upstream_p{q}_ms", None if seconds is None else round(seconds * 1000, 3))
    return proxy


class Progress:
    """One line per window (and a live line on a terminal) with an ETA. Windows that warm their
    proxy first take minutes, the others seconds, so each kind is estimated from the windows of
    that kind done so far (the plan's limits before any): `warms` says, in the order they run,
    which windows warm."""

    def __init__(self, warms: list[bool], planned_warm_s: float, planned_window_s: float):
        self.warms, self.total, self.done = warms, len(warms), 0
        self.planned = {True: planned_warm_s, False: planned_window_s}
        self.took: dict[bool, list[float]] = {True: [], False: []}
        self.started = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()

    def eta(self) -> float:
        return self.seconds(self.warms[self.done :])

    def seconds(self, warms: list[bool]) -> float:
        """What windows of these kinds take, at the pace of those of their kind done so far."""

        def each(warm: bool) -> float:
            took = self.took[warm]
            return sum(took) / len(took) if took else self.planned[warm]

        return sum(each(w) for w in warms)

    def show(self, what: str) -> None:
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        line = f"[{bar}] {self.done}/{self.total}  {what}  ETA {format_seconds(self.eta())}"
        if self.tty:
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def extend(self, windows: int, warms: list[bool] | None = None) -> None:
        """`windows` more, on warm proxies (spare windows), or of the kinds `warms` says."""
        self.warms += warms if warms is not None else [False] * windows
        self.total += len(warms) if warms is not None else windows

    def finish_one(self, summary: str) -> None:
        now = time.monotonic()
        self.took[self.warms[self.done]].append(now - self.last)  # a batch's proxy starts included
        self.done, self.last = self.done + 1, now
        if self.tty:
            print("\r\033[K", end="", file=sys.stderr)
        print(f"  {summary}", flush=True)


def format_seconds(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def planned_seconds(plan: Plan, keeps_proxies: bool = True, scrape_s: float = SCRAPE_S) -> float:
    """The most a plan takes: natively, every proxy's warm-up limit once per scenario and load (and
    once more at capacity with warm_first) and every window with its settle; with a fresh proxy per
    window, each window's warm-ups too. `scrape_s`: the backend's scrape interval."""
    windows, first = len(plan.runs()), int(plan.warm_first is not None)
    if plan.fresh or not keeps_proxies:
        return windows * fresh_window_seconds(plan)
    warmups = len(plan.proxies()) * (len(plan.scenarios) * len(plan.loads) + first)
    return warmups * plan.warmup_s + windows * kept_window_seconds(plan, scrape_s)


def fresh_window_seconds(plan: Plan) -> float:
    """The most a window on a fresh proxy takes, its warm-ups included."""
    return plan.warmup_s * (1 + int(plan.warm_first is not None)) + plan.duration_s + RUN_OVERHEAD_S


def kept_window_seconds(plan: Plan, scrape_s: float = SCRAPE_S) -> float:
    """The most a window on a proxy kept up and warm takes, its settle included, and what of the
    window before's finish (a scrape interval, or nginx's log) outlasts that settle."""
    outlasts = max(0.0, max(scrape_s, NGINX_LOG_S) - plan.settle_s)
    return plan.settle_s + plan.duration_s + WINDOW_OVERHEAD_S + outlasts


def warming(order: list[Spec], keep: bool) -> list[bool]:
    """Which windows, in the order they run, warm their proxy first: on kept proxies the first
    of each proxy's scenario and load (the warm-up at capacity with it); on fresh ones every one."""
    seen: set[tuple] = set()
    warms = []
    for s in order:
        key = (s.proxy, s.scenario, s.load)
        warms.append(not keep or key not in seen)
        seen.add(key)
    return warms


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


def spare_round(plan: Plan, taken: dict[tuple[ProxySpec, str, Load], list[Run]], seed: int) -> list[Spec]:
    """The next round of spare windows: one more for each proxy, scenario and load (`taken`: its
    windows so far) of which fewer than plan.repeats would be kept (rules.left_out_window)
    and that has had fewer than plan.spare spares; in an order of the round's own, as Plan.runs.
    None for a proxy whose warm-up stopped answering (verdict.stopped_answering): each window of it
    is left out, spares too."""
    out = [
        Spec(len(runs) + 1, p.case, scenario, load, p.copy, p.fork)
        for (p, scenario, load), runs in taken.items()
        if sum(not rules.left_out_window(r) for r in runs) < plan.repeats
        and sum(r.spare for r in runs) < plan.spare
        and not any(verdict.stopped_answering(r.warmup) for r in runs)
    ]
    return random.Random(seed).sample(out, len(out))


def batches(plan: Plan) -> list[list[ProxySpec]]:
    """The plan's proxies in groups of at most MAX_PROXIES_UP, in the plan's order (a dimension's
    cases together), one fork at a time: each group is up at once, its windows interleaved, and
    holds one JVM of every row it can (a block: what drifts between blocks hits every row alike);
    a larger plan (the distance study's 81 proxies) would not fit in memory all at once."""
    out = []
    for fork in sorted({p.fork for p in plan.proxies()}):
        proxies = [p for p in plan.proxies() if p.fork == fork]
        out += [proxies[i : i + MAX_PROXIES_UP] for i in range(0, len(proxies), MAX_PROXIES_UP)]
    return out


def run_plan(plan: Plan, backend: Backend, out_dir: Path) -> Results:
    """Runs the plan, writing out_dir/results.json after each window; returns the results.

    Natively every proxy of the plan is started first and stays up: each is warmed once per
    scenario and load, then measured in windows interleaved with the others' (round by round),
    then in spare windows where some were left out. With `plan.fresh`, or a backend that runs one
    proxy at a time, each window gets a fresh proxy, warmed again."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Results(
        plan=plan,
        backend=backend.describe(),
        environment=environment(),
        started=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    keep = backend.keeps_proxies and not plan.fresh
    specs = plan.runs()
    groups = batches(plan) if keep else [plan.proxies()]
    progress = progress_of(plan, specs, groups, keep, backend.scrape_seconds)
    session = Session(plan, backend, out_dir, results, progress, keep)
    try:
        for batch in groups:
            session.batch(batch, [s for s in specs if s.proxy in batch])
        race(session)
    except KeyboardInterrupt:
        results.interrupted = True
        print("\nlab run: interrupted; keeping the windows that finished", file=sys.stderr)
    finally:
        try:
            session.flush()
        except KeyboardInterrupt:
            pass  # its run is recorded with what it had when interrupted
        except Exception as e:  # noqa: BLE001 (the windows measured are written whatever failed here)
            print(f"lab run: the last window's figures were not all read: {e}", file=sys.stderr)
        results.finished = datetime.now(UTC).isoformat(timespec="seconds")
        results.wall_seconds = round(time.monotonic() - session.progress.started, 1)
        results.write(out_dir)
    return results


def close_calls(results: Results) -> list[tuple[str, Load, list[ProxySpec], list[str], int]]:
    """Per scenario and load, the first screen's comparisons that are neither different nor the same
    yet (conclusions.Screen.undecided), one more JVM (the next fork) of each of their rows, and its
    windows: the plan's, or RACE_WINDOWS times them where the windows are the units (their JVMs
    spread no more than the windows explain: confidence.pooled_windows)."""
    fork = max((r.fork for r in results.runs), default=0) + 1
    out = []
    for group in conclusions.groups(results):
        screen = conclusions.screen(group)
        if rows := screen.undecided():
            decisions = screen.decisions()
            named = [f"{kind} {a.name} / {b.name}" for kind, a, b, c in decisions if a in rows or b in rows]
            pooled = any(c.a.pool is not None and c.a.pool.pooled for *_, c in decisions)
            windows = RACE_WINDOWS * results.plan.repeats if pooled else results.plan.repeats
            proxies = [ProxySpec(r.case, r.copy, fork) for r in rows]
            out.append((group.scenario, group.load, proxies, sorted(set(named)), windows))
    return out


# A close call's JVM measures this many times the plan's windows where the windows are the units:
# the JVMs of the default runs kept spread no more than their windows explain, so a window is the
# cheaper unit once the JVM is warm (a warm-up about 53 s, a window with its settle about 13 s at
# run E's pace); where they are not, another JVM is.
RACE_WINDOWS = 4


def race_looks(plan: Plan, spent_s: float, round_s: float) -> int:
    """The most looks at the close calls the budget leaves room for once the plan's JVMs are done
    (`spent_s` in), a round of two rows' JVMs taking `round_s` each (of the plan's windows, the
    cheapest round): the plan's JVMs are look 0. Fixed before any decision (confidence.look_alpha)."""
    if not plan.budget_s or round_s <= 0:
        return 1
    return 1 + max(0, int((plan.budget_s - spent_s) // (2 * round_s)))


def race(session: Session) -> None:
    """Close calls decided (lab run --budget): while the first screen has comparisons that are
    neither different nor the same, their rows get one more JVM each, a round at a time, as long as
    the round fits in the run's budget at the pace measured so far and looks are left (race_looks,
    fixed before the first decision). Each round is recorded (results.races) and why they ended
    (results.race_end)."""
    plan, results = session.plan, session.results
    if not plan.budget_s or plan.forks < 2:  # one JVM a row (--forks 1): its intervals are of it
        return
    session.flush()
    progress = session.progress
    round_s = progress.seconds([True, *[False] * (plan.repeats - 1)]) + LEAK_SETTLE_S / 2
    results.race_looks = race_looks(plan, time.monotonic() - progress.started, round_s)
    while True:
        session.flush()
        calls = [c for c in close_calls(results) if looks_taken(results, c[0], c[1]) < results.race_looks - 1]
        if not calls:
            results.race_end = race_end(results)
            return
        kinds = [[True, *[False] * (windows - 1)] * len(proxies) for _, _, proxies, _, windows in calls]
        need = sum(progress.seconds(k) + LEAK_SETTLE_S for k in kinds)
        if time.monotonic() - progress.started + need > plan.budget_s:
            left = ", ".join(n for *_, names, _ in calls for n in names)
            results.race_end = (
                f"not decided within the budget ({format_seconds(plan.budget_s)}; the next round, "
                f"about {format_seconds(need)}, would pass it): {left}"
            )
            return
        for (scenario, load, proxies, names, windows), warms in zip(calls, kinds, strict=True):
            began = time.monotonic()
            specs = [
                Spec(n, p.case, scenario, load, p.copy, p.fork)
                for n in range(1, windows + 1)
                for p in proxies
            ]
            progress.extend(len(specs), warms)
            session.batch(proxies, specs)
            seconds = round(time.monotonic() - began, 1)
            results.races.append(
                Race(proxies[0].fork, scenario, load.label, [p.row for p in proxies], names, seconds)
            )
            results.write(session.out_dir)


def looks_taken(results: Results, scenario: str, load: Load) -> int:
    """The close calls' rounds run so far at `scenario` and `load`."""
    return sum(1 for r in results.races if (r.scenario, r.load) == (scenario, load.label))


def race_end(results: Results) -> str:
    """Why the close calls' rounds ended when no comparison left can take another look."""
    if not (left := close_calls(results)):
        return "every close call decided" if results.races else ""
    names = ", ".join(n for *_, names, _ in left for n in names)
    return f"not decided in the {results.race_looks - 1} round(s) the budget left room for: {names}"


def progress_of(
    plan: Plan, specs: list[Spec], groups: list[list[ProxySpec]], keep: bool, scrape_s: float = SCRAPE_S
) -> Progress:
    """The progress line of the windows in the order they run, with their planned seconds."""
    order = [s for batch in groups for s in specs if s.proxy in batch]
    if keep:
        window_s = kept_window_seconds(plan, scrape_s)
        warm_s = plan.warmup_s * (1 + int(plan.warm_first is not None)) + window_s
        return Progress(warming(order, keep), warm_s, window_s)
    return Progress(warming(order, keep), fresh_window_seconds(plan), fresh_window_seconds(plan))


@dataclass
class Session:
    """One run of a plan: its backend, results and progress, and each proxy's windows so far (by
    proxy, scenario and load: what spare windows are counted against)."""

    plan: Plan
    backend: Backend
    out_dir: Path
    results: Results
    progress: Progress
    keep: bool  # proxies kept up and warm between their windows
    taken: dict[tuple[ProxySpec, str, Load], list[Run]] = field(default_factory=dict)
    # The last window's figures left to do, done while the next window's proxy settles.
    pending: Finish | None = None

    def batch(self, batch: list[ProxySpec], specs: list[Spec]) -> None:
        """The batch's proxies up (when kept), its windows, its spare rounds, its proxies stopped."""
        lives: dict[ProxySpec, Live] = {}
        for p in batch if self.keep else ():
            self.progress.show(f"starting {p.title}")
            lives[p] = start_live(self.backend, p, self.plan, keep=True)
        for spec in specs:
            self.take(spec, lives)
        for extra in range(self.plan.spare if self.keep else 0):
            self.flush()  # every window's verdict is in before spares are counted
            mine = {k: runs for k, runs in self.taken.items() if k[0] in batch}
            if not (spares := spare_round(self.plan, mine, self.plan.repeats + extra)):
                break
            self.progress.extend(len(spares))
            for spec in spares:
                self.take(spec, lives, spare=True)
        self.flush()
        for live in lives.values():
            finish_leak_check(self.backend, live)
            self.backend.stop_case(live.proxy)

    def take(self, spec: Spec, lives: dict[ProxySpec, Live], spare: bool = False) -> None:
        """One window on its proxy (a fresh one when proxies are not kept), recorded at once."""
        self.progress.show(spec.title() + (" (spare)" if spare else ""))
        backend, plan = self.backend, self.plan
        live = lives[spec.proxy] if self.keep else start_live(backend, spec.proxy, plan, keep=False)
        finishing, self.pending = self.pending, None
        try:
            others = [o for o in lives.values() if o is not live]
            record = self.record if self.keep else lambda *_: None  # a fresh proxy's: after its leak check
            finish = measure(backend, live, spec, plan, others, finishing, record)
        except BaseException:
            if finishing is not None and not finishing.done:  # failed before its settle
                with contextlib.suppress(Exception):
                    finishing()  # recorded, and the error raised is this window's
            raise
        finish.run.spare = spare
        if self.keep:
            self.pending = finish  # finished, and recorded, within the next window's settle
            return
        try:
            finish()  # its last scrape needs the proxy up
            finish_leak_check(backend, live)
            backend.stop_case(live.proxy)
        finally:
            self.record(live, finish.run)  # with what it has, when interrupted

    def record(self, live: Live, run: Run) -> None:
        """A finished window recorded (results.json rewritten)."""
        self.taken.setdefault((live.spec, run.scenario, run.load), []).append(run)
        self.results.runs.append(run)
        self.results.write(self.out_dir)
        self.progress.finish_one(summary_line(run))

    def flush(self) -> None:
        """The last window's figures, when nothing follows it now (recorded by `recorded`)."""
        finishing, self.pending = self.pending, None
        if finishing is not None:
            finishing()
