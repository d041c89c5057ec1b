"""Prometheus export of Locust's own stats, served at /metrics on Locust's web port.

Read at scrape time from the runner's stats, which on a master already aggregate every
worker, so counters always equal Locust's own table. Response times are exported as a
histogram (from Locust's per-millisecond response_times), so Prometheus computes
quantiles over any window; no percentile of percentiles.

Generator saturation: every process samples its own CPU each second (Locust's own
monitor samples every 10 s); workers send theirs to the master. A process at or above
90% is reported in the log and as locust_lab_generator_saturated.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

import gevent
import psutil
from lab_latency import Latencies
from locust.runners import MasterRunner, WorkerRunner
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from lab_window import WindowStats

log = logging.getLogger("lab")

SATURATION_CPU_PERCENT = 90.0
# Bucket bounds in milliseconds, as Locust measures (it keeps response times per ms).
BUCKETS_MS = (
    1,
    2,
    5,
    10,
    20,
    30,
    50,
    75,
    100,
    150,
    200,
    300,
    500,
    750,
    1000,
    1500,
    2000,
    2500,
    3000,
    4000,
    5000,
    7500,
    10000,
    15000,
    30000,
    60000,
)


class CpuWatch:
    """CPU of this process and (on a master) of each worker: now and the most seen."""

    def __init__(self, node: str):
        self.node = node
        self.now: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.warned: set[str] = set()

    def record(self, node: str, cpu: float) -> None:
        self.now[node] = cpu
        self.peak[node] = max(cpu, self.peak.get(node, 0.0))
        if cpu >= SATURATION_CPU_PERCENT and node not in self.warned:
            self.warned.add(node)
            log.warning(
                "lab: generator saturated: %s at %.0f%% CPU; the rate may be Locust's, not the target's",
                node,
                cpu,
            )

    def reset_peaks(self) -> None:
        self.peak = dict(self.now)
        self.warned.clear()

    @property
    def saturated(self) -> bool:
        return any(v >= SATURATION_CPU_PERCENT for v in self.peak.values())


def install(environment, settings: dict, target: dict) -> None:
    runner = environment.runner
    node = (
        "master"
        if isinstance(runner, MasterRunner)
        else "worker"
        if isinstance(runner, WorkerRunner)
        else "local"
    )
    watch = CpuWatch(node)
    flush = Flush(runner)
    if runner is not None:
        gevent.spawn(_sample_cpu, environment, watch)
        if isinstance(runner, MasterRunner):
            runner.register_message(
                "lab_cpu",
                lambda msg, **_: watch.record(f"worker-{msg.data['id']}", msg.data["cpu"]),
            )
            runner.register_message("lab_flushed", flush.answered)
        if isinstance(runner, WorkerRunner):
            runner.register_message("lab_flush", _send_stats_now)
    environment.events.test_start.add_listener(lambda **_: watch.reset_peaks())
    # Locust's "reset stats" (web UI or /stats/reset) starts a new window for the peaks too.
    environment.events.reset_stats.add_listener(lambda **_: watch.reset_peaks())
    environment.events.test_stop.add_listener(lambda **_: _summary(watch))
    environment.lab_cpu_watch = watch  # for tests and other plugins
    latencies = environment.lab_latencies = Latencies()
    environment.events.request.add_listener(lambda **kw: _record(latencies, **kw))
    environment.events.reset_stats.add_listener(latencies.reset)
    if isinstance(runner, WorkerRunner):
        environment.events.report_to_master.add_listener(lambda data, **_: _report(latencies, data))
    if isinstance(runner, MasterRunner):
        environment.events.worker_report.add_listener(
            lambda data, **_: latencies.add(data.get("lab_latency", {}))
        )

    if environment.web_ui is None:
        return
    refuse_other_origins(environment.web_ui.app)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(environment, settings, target, watch, latencies))

    @environment.web_ui.app.route("/metrics")
    def metrics():
        return generate_latest(registry), 200, {"Content-Type": CONTENT_TYPE_LATEST}

    @environment.web_ui.app.route("/lab/stats")
    def lab_stats():
        flush()
        return window_stats(environment, settings, target, watch, latencies)

    @environment.web_ui.app.route("/lab/reset", methods=["POST"])
    def lab_reset():
        """Locust's reset (/stats/reset) once every worker has sent what it counted before it."""
        flush()
        environment.events.reset_stats.fire()  # the latencies' window too (install)
        environment.runner.stats.reset_all()
        environment.runner.exceptions = {}
        return "ok"

    @environment.web_ui.app.route("/lab/proxy-metrics")
    def lab_proxy_metrics():
        return proxy_metrics(environment)


# Seconds the proxy has to answer its /metrics through /lab/proxy-metrics, unless asked (1-60).
PROXY_METRICS_TIMEOUT_S = 30


def proxy_metrics(environment):
    """The /metrics of the host Locust was started with (--host: the lab's proxy), read from this
    process, for `lab swarm run`: on a swarm the proxy answers on the stack's overlay only, so the
    window's edges are read here at the moment they are asked for. Only that host's scheme, host
    and port with the path /metrics, whatever a run's form named since; no redirect followed and
    no forward proxy of the environment used; behind the UI's login like every route but /metrics."""
    import requests
    from flask import request

    from lab_guard import origin

    own = origin(getattr(environment.parsed_options, "host", None) or "")
    if own is None:
        return "refused: Locust was started without a host (--host): no proxy to read\n", 403, {}
    try:
        timeout = min(max(float(request.args.get("timeout", PROXY_METRICS_TIMEOUT_S)), 1.0), 60.0)
    except ValueError:
        timeout = PROXY_METRICS_TIMEOUT_S
    session = requests.Session()
    session.trust_env = False  # never through HTTP(S)_PROXY
    url = f"{own}/metrics"
    try:
        r = session.get(url, timeout=timeout, allow_redirects=False)
    except requests.RequestException as e:
        return f"{url} did not answer: {type(e).__name__}\n", 502, {"Content-Type": "text/plain"}
    finally:
        session.close()
    kind = r.headers.get("Content-Type", "text/plain")
    return r.content, 200 if r.status_code == 200 else 502, {"Content-Type": kind}


# Seconds the master waits for every worker's stats when a window's edge asks for them.
FLUSH_TIMEOUT_S = 2.0


class Flush:
    """A window's edge on a master: every worker sends its stats now and the master has merged
    them before the edge is read or reset. Locust's workers report every 3 s and its reset does not
    reach them, so without this a window's counts would take in up to 3 s before its start and miss
    up to 3 s before its end. A worker answers after its stats (one connection keeps the order)."""

    def __init__(self, runner):
        self.runner = runner
        self.token = 0
        self.answers: set[str] = set()

    def answered(self, environment, msg, **_) -> None:
        if msg.data.get("token") == self.token:
            self.answers.add(msg.node_id)

    def __call__(self) -> bool:
        """True once every worker has answered (at once with none, or on a single process)."""
        if not isinstance(self.runner, MasterRunner):
            return True
        workers = {
            c.id
            for c in self.runner.clients.ready + self.runner.clients.spawning + self.runner.clients.running
        }
        if not workers:
            return True
        self.token += 1
        self.answers = set()
        self.runner.send_message("lab_flush", {"token": self.token})
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while not workers <= self.answers and time.monotonic() < deadline:
            gevent.sleep(0.01)
        if not workers <= self.answers:
            log.warning(
                "lab: %d of %d workers sent their stats for a window's edge", len(self.answers), len(workers)
            )
            return False
        return True


def _record(latencies: Latencies, response_time=0.0, context=None, **_) -> None:
    """One request into the latencies: Locust's time (ms, from the send) and what the user's
    context() said of its schedule (locustfile.LabUser)."""
    c = context or {}
    delay = c["lab_sent"] - c["lab_intended"] if "lab_intended" in c else 0.0
    latencies.record(
        (response_time or 0.0) / 1000.0, delay, c.get("lab_late", False), c.get("lab_skipped", ())
    )


def _report(latencies: Latencies, data: dict) -> None:
    """Worker: what it recorded since its last report goes with Locust's stats to the master."""
    data["lab_latency"] = latencies.report()


def _send_stats_now(environment, msg, **_) -> None:
    """Worker: its stats to the master now, then the answer (lab_export.Flush)."""
    environment.runner._send_stats()
    environment.runner.send_message("lab_flushed", {"token": msg.data["token"]})


def refuse_other_origins(app) -> None:
    """Only pages served by this UI may drive it.

    Locust's web UI allows every origin (flask-cors) and starts, stops and resets runs on plain
    POSTs and GETs, so any page open in the operator's browser could make the lab send load to
    any host. Here a request that a browser marks as coming from another origin is refused with
    403 before Locust sees it: an `Origin` other than the UI's own, or a cross-site request that
    is not the operator following a link to the UI's front page. Tools (curl, Prometheus, `lab`)
    send neither header and are not affected. The CORS headers go too: no other origin needs them.
    """
    from flask import request

    funcs = app.after_request_funcs.get(None, [])
    funcs[:] = [f for f in funcs if f.__name__ != "cors_after_request"]

    @app.before_request
    def same_origin_only():
        why = foreign_request(request.headers, request.path)
        if why:
            log.warning("lab: refused %s %s: %s", request.method, request.path, why)
            return f"refused: {why}\n", 403, {"Content-Type": "text/plain"}
        return None


def foreign_request(headers, path: str) -> str | None:
    """Why a request with these headers comes from another site's page, or None."""
    origin = headers.get("Origin")
    if origin is not None:
        own = {f"http://{headers.get('Host', '')}", f"https://{headers.get('Host', '')}"}
        if origin not in own:
            return f"Origin {origin} is not this UI's"
    site, mode = headers.get("Sec-Fetch-Site"), headers.get("Sec-Fetch-Mode")
    if site == "cross-site" and not (mode == "navigate" and path == "/"):
        return "cross-site request"
    return None


def window_stats(environment, settings: dict, target: dict, watch: CpuWatch, latencies: Latencies) -> dict:
    """Totals since the run started or the stats were last reset, for `lab run`: exact
    percentiles from Locust's per-millisecond counts, the latencies' histograms (lab_latency), the
    window's bounds, and the generator's CPU peaks in it."""
    runner = environment.runner
    total = runner.stats.total
    any_ = bool(total.num_requests)
    return asdict(
        WindowStats(
            state=runner.state,
            now=time.time(),
            start_time=total.start_time,
            last_request_timestamp=total.last_request_timestamp,
            requests=total.num_requests,
            failures=total.num_failures,
            p50_ms=total.get_response_time_percentile(0.5) if any_ else None,
            p95_ms=total.get_response_time_percentile(0.95) if any_ else None,
            p99_ms=total.get_response_time_percentile(0.99) if any_ else None,
            max_ms=total.max_response_time if any_ else None,
            avg_ms=total.avg_response_time if any_ else None,
            users=runner.user_count,
            workers=runner.worker_count if isinstance(runner, MasterRunner) else 0,
            target_rps=target["rps"] if settings.get("load_model") != "closed" else 0,
            cpu_peak_percent=dict(watch.peak),
            saturated=watch.saturated,
            settings={k: v for k, v in settings.items() if isinstance(v, (str, int, float, bool))},
            errors=[
                {"method": e.method, "name": e.name, "error": str(e.error), "occurrences": e.occurrences}
                for e in runner.stats.errors.values()
            ][:20],
            **latencies.window(),
        )
    )


def _sample_cpu(environment, watch: CpuWatch) -> None:
    process = psutil.Process()
    process.cpu_percent()
    runner = environment.runner
    while True:
        gevent.sleep(1.0)
        cpu = process.cpu_percent()
        watch.record(watch.node, cpu)
        if isinstance(runner, WorkerRunner):
            try:
                runner.send_message("lab_cpu", {"id": runner.client_id, "cpu": cpu})
            except Exception:  # noqa: BLE001 - the master may be gone; keep sampling
                pass


def _summary(watch: CpuWatch) -> None:
    peaks = ", ".join(f"{n} {v:.0f}%" for n, v in sorted(watch.peak.items()))
    if watch.saturated:
        log.warning(
            "lab: generator saturated during the run (peak CPU: %s): its rate is not the target's capacity",
            peaks,
        )
    else:
        log.info("lab: generator not saturated (peak CPU: %s)", peaks)


class _Collector:
    def __init__(self, environment, settings: dict, target: dict, watch: CpuWatch, latencies: Latencies):
        self.latencies = latencies
        self.environment = environment
        self.settings = settings
        self.target = target
        self.watch = watch

    def collect(self):
        runner = self.environment.runner
        stats = runner.stats
        requests = CounterMetricFamily(
            "locust_requests",
            "Requests made, by name and method",
            labels=["name", "method"],
        )
        failures = CounterMetricFamily(
            "locust_failures",
            "Requests failed, by name and method",
            labels=["name", "method"],
        )
        times = HistogramMetricFamily(
            "locust_response_time_seconds",
            "Response times as Locust measured them",
            labels=["name", "method"],
        )
        for (name, method), entry in sorted(stats.entries.items()):
            requests.add_metric([name, method], entry.num_requests)
            failures.add_metric([name, method], entry.num_failures)
            times.add_metric(
                [name, method],
                _buckets(entry.response_times),
                sum_value=entry.total_response_time / 1000.0,
            )
        yield requests
        yield failures
        yield times
        yield from self.latency_families()

        yield GaugeMetricFamily("locust_users", "Users running now", value=runner.user_count)
        yield GaugeMetricFamily(
            "locust_current_rps",
            "Requests a second over the last seconds (Locust's own)",
            value=stats.total.current_rps,
        )
        yield GaugeMetricFamily(
            "locust_target_rps",
            "Rate asked for (rate and sweep models; 0 otherwise)",
            value=self.target["rps"] if self.settings.get("load_model") != "closed" else 0,
        )
        workers = runner.worker_count if isinstance(runner, MasterRunner) else 0
        yield GaugeMetricFamily("locust_workers", "Workers connected to this master", value=workers)

        cpu = GaugeMetricFamily(
            "locust_cpu_percent",
            "CPU of each Locust process, sampled each second",
            labels=["node"],
        )
        peak = GaugeMetricFamily(
            "locust_cpu_peak_percent",
            "Highest CPU of each Locust process in this run",
            labels=["node"],
        )
        for node in sorted(self.watch.now):
            cpu.add_metric([node], self.watch.now[node])
            peak.add_metric([node], self.watch.peak.get(node, 0.0))
        yield cpu
        yield peak
        yield GaugeMetricFamily(
            "locust_lab_generator_saturated",
            "1 when a Locust process reached 90% CPU in this run: its rate may be Locust's",
            value=1 if self.watch.saturated else 0,
        )

        keys = (
            "case",
            "scenario",
            "load_model",
            "wait_min",
            "wait_max",
            "target_rps",
            "large_size",
            "upload_size",
            "delay_ms",
        )
        info = GaugeMetricFamily(
            "locust_lab_info",
            "The load settings in force; value is always 1",
            labels=list(keys),
        )
        info.add_metric([str(self.settings.get(k, "")) for k in keys], 1)
        yield info

    def latency_families(self):
        """The latencies since Locust started (lab_latency), never reset: from the intended start and
        from the send, in buckets from 100 us; and the starts, late and never sent."""
        lat = self.latencies
        family = HistogramMetricFamily(
            "locust_lab_latency_seconds",
            "Latency of every request: start=intended from its intended start (the rate and sweep "
            "models), start=sent from its send (Locust's own, unrounded)",
            labels=["start"],
        )
        for start in ("intended", "sent"):
            buckets = [("+Inf" if b == float("inf") else repr(b), n) for b, n in lat.cumulative(start)]
            family.add_metric([start], buckets, sum_value=lat.sums[start] / 1e6)
        yield family
        starts = CounterMetricFamily(
            "locust_lab_starts", "Intended starts, by what became of them", labels=["kind"]
        )
        for kind in ("all", "late", "missed"):
            starts.add_metric([kind], lat.totals[kind])
        yield starts


def _buckets(response_times: dict[int, int]) -> list[tuple[str, float]]:
    """Cumulative counts for BUCKETS_MS from Locust's {rounded ms: count}, plus +Inf."""
    out, total = [], 0
    ordered = sorted(response_times.items())
    i = 0
    for bound in BUCKETS_MS:
        while i < len(ordered) and ordered[i][0] <= bound:
            total += ordered[i][1]
            i += 1
        out.append((str(bound / 1000.0), total))
    total += sum(c for _, c in ordered[i:])
    out.append(("+Inf", total))
    return out
