"""`lab run`: cases x scenarios x load levels, headless, into results/<timestamp>/results.json.

Per run: a fresh proxy process for the case; Locust (one process for the whole matrix,
driven through its web API) loads it for an unmeasured warm-up, then its stats are reset
and a fixed window is measured. Repeats are interleaved (A B A B, not A A B B) so that
drift of the machine hits every case alike. results.json is rewritten after every run, so
Ctrl-C keeps what finished.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import requests

from . import verdict
from .bench import _version, jit_cpu_seconds
from .loadgen import LocustWeb
from .paths import REPO, SCENARIOS, split_case

WARMUP_WINDOW_S = 5
WARMUP_TOLERANCE = 0.05
JIT_QUIET_SHARE = 0.02
# Seconds after the load stops before threads and open files are compared with the idle proxy's.
LEAK_SETTLE_S = 6


@dataclass(frozen=True)
class Load:
    """One load level: `closed/USERS/WAIT` (WAIT in seconds, `0` or `1-2`) or `rate/RPS[/USERS]`."""

    model: str
    users: int
    wait_min: float = 0.0
    wait_max: float = 0.0
    target_rps: float = 0.0

    @property
    def label(self) -> str:
        if self.model == "rate":
            return f"rate/{self.target_rps:g}/{self.users}"
        wait = (
            f"{self.wait_min:g}" if self.wait_min == self.wait_max else f"{self.wait_min:g}-{self.wait_max:g}"
        )
        return f"closed/{self.users}/{wait}"


LOAD_HELP = "closed/USERS/WAIT (e.g. closed/50/0, closed/1000/1-2) or rate/RPS[/USERS] (e.g. rate/500)"


def parse_load(text: str) -> Load:
    """ValueError with the accepted forms for anything else."""
    parts = text.strip().split("/")
    try:
        if parts[0] == "closed" and len(parts) == 3:
            users = int(parts[1])
            lo, _, hi = parts[2].partition("-")
            wait_min, wait_max = float(lo), float(hi or lo)
            if users >= 1 and 0 <= wait_min <= wait_max:
                return Load("closed", users, wait_min, wait_max)
        if parts[0] == "rate" and len(parts) in (2, 3):
            rps = float(parts[1])
            users = int(parts[2]) if len(parts) == 3 else max(10, math.ceil(rps / 10))
            if rps > 0 and users >= 1:
                return Load("rate", users, target_rps=rps)
    except ValueError:
        pass
    raise ValueError(f"load level {text!r} is not valid; give {LOAD_HELP}")


@dataclass
class Plan:
    cases: list[str]
    scenarios: list[str]
    loads: list[Load]
    repeats: int = 1
    warmup_s: int = 20
    duration_s: int = 30
    workers: int = 0
    java_opts: str = "-Xmx512m"
    proxy_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for case in self.cases:
            split_case(case)
        if bad := [s for s in self.scenarios if s not in SCENARIOS]:
            raise ValueError(f"unknown scenario {bad[0]!r}; valid scenarios: {', '.join(SCENARIOS)}")
        if self.repeats < 1 or self.duration_s < 1 or self.warmup_s < 0 or self.workers < 0:
            raise ValueError("repeats and duration must be at least 1; warm-up and workers at least 0")
        if not (self.cases and self.scenarios and self.loads):
            raise ValueError("the matrix is empty: give at least one case, scenario and load level")

    def runs(self) -> list[dict]:
        """Every run in the order it is made: each repeat goes through all cases before the next."""
        return [
            {"repeat": r + 1, "case": case, "scenario": scenario, "load": load}
            for r in range(self.repeats)
            for case in self.cases
            for scenario in self.scenarios
            for load in self.loads
        ]

    def to_json(self) -> dict:
        d = asdict(self)
        d["loads"] = [{"label": load.label, **asdict(load)} for load in self.loads]
        return d


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


def environment() -> dict:
    """Commit, versions and machine, recorded beside the numbers."""

    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else "unknown"

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
    from importlib.metadata import version

    from .proxy import java

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "cpu_model": cpu_model,
            "memory_gib": round(mem_kb / (1 << 20), 1),
            "kernel": platform.release(),
            "hostname": platform.node(),
        },
        "versions": {
            "java": _version([java(), "-version"]),
            "locust": version("locust"),
            "python": platform.python_version(),
            "nginx": _version(["nginx", "-v"]),
            "prometheus": _version(["prometheus", "--version"]),
        },
    }


def prom_query(base: str, query: str, at: float) -> float | None:
    """One number from an instant query at `at`; None for an empty result."""
    body = requests.get(
        f"{base}/api/v1/query", params={"query": query, "time": f"{at:.3f}"}, timeout=10
    ).json()
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {query!r}: {body.get('error')}")
    result = body["data"]["result"]
    if not result:
        return None
    v = float(result[0]["value"][1])
    return v if math.isfinite(v) else None


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


def proxy_gauges(metrics_url: str) -> dict:
    """The proxy's live threads and open files now (for the leak check)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"jvm_threads_live_threads": "threads", "process_files_open_files": "files"}
    out = dict.fromkeys(wanted.values())
    for family in text_string_to_metric_families(requests.get(f"{metrics_url}/metrics", timeout=30).text):
        for s in family.samples:
            if s.name in wanted:
                out[wanted[s.name]] = s.value
    return out


def proxy_snapshot(metrics_url: str) -> dict:
    """The proxy's counters (see COUNTERS) and its settings (lab_proxy_info), read directly."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {key: 0.0 for key in COUNTERS}
    by_sample = {sample: key for key, sample in COUNTERS.items()}
    text = requests.get(f"{metrics_url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in by_sample:
                out[by_sample[s.name]] += s.value
            elif s.name == "lab_proxy_info":
                out["settings"] = dict(s.labels)
    out["cpu_seconds"] /= 1e9
    return out


class Interrupted(Exception):
    """Ctrl-C during a run: the results so far are kept."""


def warm_up(web: LocustWeb, seconds: int, jvm_pid: int | None) -> dict:
    """Unmeasured load in 5 s windows until two windows agree within 5% and (for a JVM we can
    see) its JIT compilers were quiet, or `seconds` pass."""
    spent, previous, settled = 0, None, seconds == 0
    jit = jit_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    rates = []
    while spent + WARMUP_WINDOW_S <= seconds:
        before = web.stats()
        time.sleep(WARMUP_WINDOW_S)
        after = web.stats()
        rps = (after["requests"] - before["requests"]) / max(after["now"] - before["now"], 1e-3)
        rates.append(round(rps, 1))
        spent += WARMUP_WINDOW_S
        quiet = True
        if jvm_pid:
            now = jit_cpu_seconds(jvm_pid)
            quiet, jit = now - jit < JIT_QUIET_SHARE * WARMUP_WINDOW_S, now
        if quiet and previous and abs(rps - previous) <= WARMUP_TOLERANCE * previous:
            settled = True
            break
        previous = rps
    return {"seconds": spent, "settled": settled, "window_rates": rates, "jvm_visible": jvm_pid is not None}


def measure(backend, spec: dict, plan: Plan) -> dict:
    """One run: fresh proxy, warm-up, reset, window, then the window's figures."""
    case, scenario, load = spec["case"], spec["scenario"], spec["load"]
    lifetime, engine = split_case(case)
    jvm_pid = backend.start_case(case, plan.proxy_env)
    idle = proxy_gauges(backend.proxy_metrics_url)
    web = LocustWeb(backend.locust_url)
    custom = {
        "scenario": scenario,
        "load_model": load.model,
        "wait_min": load.wait_min,
        "wait_max": load.wait_max,
        "target_rps": load.target_rps,
        "lab_case": case,
    }
    run: dict = {
        "case": case,
        "engine": engine,
        "lifetime": lifetime,
        "scenario": scenario,
        "load": {"label": load.label, **asdict(load)},
        "repeat": spec["repeat"],
    }
    try:
        web.swarm(backend.locust_host, load.users, load.users, **custom)
        run["warmup"] = warm_up(web, plan.warmup_s, jvm_pid)
        jit_before = jit_cpu_seconds(jvm_pid) if jvm_pid else None
        web.reset()
        before = proxy_snapshot(backend.proxy_metrics_url)
        started = time.time()
        time.sleep(plan.duration_s)
        stats = web.stats()
        after = proxy_snapshot(backend.proxy_metrics_url)
        ended = time.time()
    finally:
        try:
            web.stop()
        except requests.RequestException:
            pass
        stopped = time.monotonic()
    elapsed = max(stats["now"] - stats["start_time"], 1e-3)
    run["window"] = {"start": started, "end": ended, "seconds": round(ended - started, 3)}
    run["locust"] = {
        "requests": stats["requests"],
        "failures": stats["failures"],
        "rps": stats["requests"] / elapsed,
        **{
            k: stats[k]
            for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "avg_ms", "users", "workers", "target_rps")
        },
        "cpu_peak_percent": stats["cpu_peak_percent"],
        "saturated": stats["saturated"],
        "settings": stats["settings"],
        "errors": stats["errors"],
    }
    run["proxy"] = {key: round(after[key] - before[key], 6) for key in COUNTERS}
    run["proxy"]["settings"] = after.get("settings", {})
    if run["proxy"]["upstream_requests"]:
        run["proxy"]["cpu_seconds_per_1000_requests"] = (
            run["proxy"]["cpu_seconds"] / run["proxy"]["upstream_requests"] * 1000
        )
    if jit_before is not None:
        run["proxy"]["jit_cpu_seconds_in_window"] = round(jit_cpu_seconds(jvm_pid) - jit_before, 2)
    time.sleep(backend.scrape_seconds + 0.5)  # the window's last scrape
    window_s = max(1, round(ended - started))
    run["prometheus"] = {
        name: prom_query(backend.prometheus_url, q, ended)
        for name, q in window_queries(engine, lifetime, window_s).items()
    }
    time.sleep(max(0.0, LEAK_SETTLE_S - (time.monotonic() - stopped)))
    after = proxy_gauges(backend.proxy_metrics_url)
    run["leak"] = {
        "settle_s": LEAK_SETTLE_S,
        "threads_idle": idle["threads"],
        "threads_after": after["threads"],
        "files_idle": idle["files"],
        "files_after": after["files"],
    }
    run["verdict"] = verdict.judge(run)
    return run


def summary_line(run: dict) -> str:
    lc = run["locust"]
    flags = ", ".join(run["verdict"]["flags"]) or "capacity"
    cpu = run["proxy"].get("cpu_seconds_per_1000_requests")
    cpu_text = f"{cpu:.2f} CPU s/1000" if cpu is not None else "CPU n/a"
    return (
        f"{run['case']:<18} {run['scenario']:<12} {run['load']['label']:<16} #{run['repeat']}  "
        f"{lc['rps']:8.1f} rps  p50 {fmt(lc['p50_ms'])} p99 {fmt(lc['p99_ms'])} ms  "
        f"fail {lc['failures']}  {cpu_text}  [{flags}]"
    )


def fmt(v) -> str:
    return "-" if v is None else f"{v:g}"


def run_matrix(plan: Plan, backend, out_dir: Path) -> dict:
    """Runs the plan, writing out_dir/results.json after each run; returns the results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {
        "format": 1,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "finished": None,
        "interrupted": False,
        "backend": backend.describe(),
        "plan": plan.to_json(),
        "environment": environment(),
        "runs": [],
    }
    specs = plan.runs()
    progress = Progress(len(specs), plan.warmup_s + plan.duration_s + 8)
    try:
        for spec in specs:
            progress.show(f"{spec['case']} {spec['scenario']} {spec['load'].label} #{spec['repeat']}")
            run = measure(backend, spec, plan)
            results["runs"].append(run)
            write(out_dir, results)
            progress.finish_one(summary_line(run))
    except KeyboardInterrupt:
        results["interrupted"] = True
        print("\nlab run: interrupted; keeping the runs that finished", file=sys.stderr)
    finally:
        results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        results["wall_seconds"] = round(time.monotonic() - progress.started, 1)
        write(out_dir, results)
    return results


def write(out_dir: Path, results: dict) -> None:
    tmp = out_dir / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, default=str))
    tmp.replace(out_dir / "results.json")
