"""`lab study threads`: how many threads each engine holds for N requests in flight.

The thread-count study sent 500 requests at once to a server answering after 2 s and
counted threads. Here: N requests at once through the proxy (singleton, one engine) to
nginx's /delay; live and active-unparked threads read from the proxy's /metrics at 1 s
(minus the idle figures read just before), the time until the last answer, and how many
waves the answers came in (a wave = answers separated by less than half the delay).
Each (engine, limits, N) gets a fresh proxy, once with the engines' own limits
(CLIENT_LIMITS=defaults) and once with the lab's fair limit (CLIENT_MAX_CONNECTIONS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import requests

from .. import metrics, render, versions
from ..backends import Backend
from ..cases import Case, engine_list
from . import machinery

# Seconds the proxy idles after its unmeasured requests, before its idle figures are read.
IDLE_S = 0.5
# Seconds a burst takes beyond its waves of the delay, per request sent at once (connecting,
# sending, reading the answers, the thread samples): 1,000 at once took 1.9 s more than the delay
# in the study's run (docs/studies/threads.md); 5 ms each leaves room.
BURST_S_PER_REQUEST = 0.005


def thread_gauges(proxy_url: str) -> dict[str, float]:
    """Live and active-unparked threads from the proxy's own /metrics."""
    live, unparked = machinery.proxy_figures(
        proxy_url, ("jvm_threads_live_threads", {}), ("lab_threads_active_unparked", {})
    )
    return {"live": live, "unparked": unparked}


async def one_request(host: str, port: int, path: str, deadline: float) -> tuple[int, float]:
    """GET path with Connection: close; (status, seconds until the whole answer was read)."""
    t0 = time.monotonic()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), deadline)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(-1), max(0.1, deadline - (time.monotonic() - t0)))
    finally:
        writer.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - t0


def waves(done_at: list[float], delay_s: float) -> int:
    """Clusters of answer times: a new wave starts after a gap of more than half the delay."""
    if not done_at:
        return 0
    ts = sorted(done_at)
    return 1 + sum(1 for a, b in zip(ts, ts[1:], strict=False) if b - a > delay_s / 2)


# Seconds between the samples of the threads' peak during a burst.
PEAK_EVERY_S = 0.25


async def burst_of(
    proxy_url: str, n: int, delay_ms: int, sample_at: float, deadline: float
) -> tuple[dict, dict[str, float], dict[str, float]]:
    """N requests at once: their `answers`, the threads sampled at `sample_at` s (and when), and
    their peak, sampled every PEAK_EVERY_S."""
    host, port = proxy_url.removeprefix("http://").split(":")
    path = f"/delay?ms={delay_ms}"
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(one_request(host, int(port), path, deadline)) for _ in range(n)]
    at: dict[str, float] = {}
    peak = {"live": 0.0, "unparked": 0.0}
    next_peak = PEAK_EVERY_S
    while not all(t.done() for t in tasks) and time.monotonic() - t0 < deadline:
        await asyncio.sleep(0.05)
        elapsed = time.monotonic() - t0
        if elapsed < next_peak and (at or elapsed < sample_at):
            continue
        g = await asyncio.to_thread(thread_gauges, proxy_url)
        if not at and elapsed >= sample_at:
            at = {**g, "at_s": round(time.monotonic() - t0, 2)}
        next_peak = elapsed + PEAK_EVERY_S
        peak = {k: max(v, g[k]) for k, v in peak.items()}
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return answers(results, delay_ms), at, peak


def answers(results: list, delay_ms: int) -> dict:
    """A burst's requests as they ended: (status, seconds) for an answer, an exception for none.
    Finished when every request was answered, some perhaps with an error (the errors column says
    so); the completion is then the last answer's time."""
    done = [r for r in results if isinstance(r, tuple)]
    ok = [r for r in done if r[0] == 200]
    return {
        "ok": len(ok),
        "failed": len(done) - len(ok),
        "unfinished": len(results) - len(done),
        "statuses": sorted({r[0] for r in done}),
        "finished": len(done) == len(results),
        "completion_s": round(max(r[1] for r in done), 2) if done else None,
        "waves": waves([r[1] for r in ok], delay_ms / 1000),
    }


@dataclass(frozen=True)
class Burst:
    """One run of the plan: N requests at once through one engine with one kind of limits."""

    engine: str
    limits: str  # CLIENT_LIMITS: defaults (the engine's own) or fair
    n: int
    delay_ms: int  # the upstream's answer delay
    deadline: float  # seconds before the burst is cut short
    max_connections: int  # the fair limit (CLIENT_MAX_CONNECTIONS)

    KIND: ClassVar[str] = "burst"  # its dry run's line: "30 burst item(s) (engines x limits x N)"
    EACH: ClassVar[str] = "engines x limits x N"

    def planned_seconds(self) -> float:
        """The most it should take: a fresh proxy (PROXY_START_S; its 5 unmeasured requests are
        instant) and IDLE_S, then the burst: with the fair limit, ceil(N / max connections) waves
        of the delay plus BURST_S_PER_REQUEST per request; with the engine's own limits, which may
        queue the requests (OkHttp's 5 per host did), the deadline. Never past the deadline."""
        waves = math.ceil(self.n / max(1, self.max_connections)) if self.limits == "fair" else math.inf
        burst = min(self.deadline, waves * self.delay_ms / 1000 + self.n * BURST_S_PER_REQUEST)
        return machinery.PROXY_START_S + IDLE_S + burst


@dataclass
class BurstRow:
    engine: str
    limits: str
    n: int
    ok: int
    failed: int
    unfinished: int
    statuses: list[int]
    finished: bool
    completion_s: float | None
    waves: int
    idle_live: float | None
    idle_unparked: float | None
    sampled_at_s: float | None
    live_at: float | None
    unparked_at: float | None
    live_added: float | None
    unparked_added: float | None
    live_peak: float
    deadline_s: float
    proxy_settings: dict[str, str] = field(default_factory=dict)


def plan(args: argparse.Namespace) -> list[Burst]:
    engines = engine_list(args.engines)
    ns = [int(x) for x in args.n.split(",")]
    limits = args.limits.split(",")
    if bad := [x for x in limits if x not in ("defaults", "fair")]:
        raise ValueError(f"--limits {bad[0]!r}: give defaults, fair or both")
    return [
        Burst(engine, lim, n, args.delay_ms, args.deadline, args.max_connections)
        for lim in limits
        for engine in engines
        for n in ns
    ]


@contextlib.contextmanager
def parts(args: argparse.Namespace, d: Path) -> Iterator[Backend]:
    """The proxies through the native backend, the open files raised to their hard limit first: N
    sockets at once need more than the usual 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with machinery.proxies(args, d) as backend:
        yield backend


def timeouts_ms(args: argparse.Namespace) -> tuple[int, int]:
    """The proxy's request and connect timeouts: queued requests must wait, not time out (the
    completion time is the finding); both, since CIO counts the wait for a free connection
    against the connect timeout."""
    request = int((args.deadline + 30) * 1000)
    return request, args.connect_timeout_ms or request


def measure(backend: Backend, burst: Burst, args: argparse.Namespace) -> list[BurstRow]:
    request_ms, connect_ms = timeouts_ms(args)
    with machinery.proxy_up(
        backend,
        Case("singleton", burst.engine),
        CLIENT_LIMITS=burst.limits,
        CLIENT_MAX_CONNECTIONS=str(burst.max_connections),
        CLIENT_REQUEST_TIMEOUT_MS=str(request_ms),
        CLIENT_CONNECT_TIMEOUT_MS=str(connect_ms),
    ) as url:
        # Unmeasured: the first calls create the client, load classes and open a few connections.
        for _ in range(5):
            requests.get(f"{url}/delay?ms=0", timeout=30).raise_for_status()
        time.sleep(IDLE_S)
        idle = thread_gauges(url)
        answered, at, peak = asyncio.run(
            burst_of(url, burst.n, burst.delay_ms, args.sample_at, burst.deadline)
        )
        settings = metrics.scrape(url).labels("lab_proxy_info")
    return [
        BurstRow(
            engine=burst.engine,
            limits=burst.limits,
            n=burst.n,
            **answered,
            idle_live=idle["live"],
            idle_unparked=idle["unparked"],
            sampled_at_s=at.get("at_s"),
            live_at=at.get("live"),
            unparked_at=at.get("unparked"),
            live_added=_minus(at.get("live"), idle["live"]),
            unparked_added=_minus(at.get("unparked"), idle["unparked"]),
            live_peak=peak["live"],
            deadline_s=burst.deadline,
            proxy_settings=settings,
        )
    ]


def _minus(a, b):
    return None if a is None or b is None else a - b


def columns(sample_at: float) -> list[render.Column]:
    return [
        render.Column("engine", lambda r: r.engine),
        render.Column("limits", lambda r: r.limits),
        render.Column("N", lambda r: r.n),
        render.Column(
            f"live threads at {sample_at:g} s (idle + added)",
            lambda r: _plus_text(r.idle_live, r.live_added),
        ),
        render.Column(
            f"active unparked at {sample_at:g} s (idle + added)",
            lambda r: _plus_text(r.idle_unparked, r.unparked_added),
        ),
        render.Column("live peak", lambda r: r.live_peak),
        render.Column("completion s", lambda r: _completion_text(r)),
        render.Column("waves", lambda r: r.waves),
        render.Column("errors", lambda r: r.failed),
    ]


def _plus_text(idle, added) -> str:
    if idle is None or added is None:
        return "-"
    return f"{idle:.0f} + {added:.0f}"


def _completion_text(r: BurstRow) -> str:
    if r.finished:
        return f"{r.completion_s:.1f}"
    return f"> {r.deadline_s:.0f} ({r.ok + r.failed} of {r.n} done)"


def progress(r: BurstRow) -> str:
    return (
        f"{r.engine} {r.limits} N={r.n}: +{r.unparked_added or 0:.0f} active unparked, "
        f"+{r.live_added or 0:.0f} live at {r.sampled_at_s} s; {_completion_text(r)} s, {r.waves} waves, "
        f"{r.failed} errors"
    )


def report(rows: list[BurstRow], args: argparse.Namespace) -> machinery.Report:
    engines = list(dict.fromkeys(r.engine for r in rows))
    limits = list(dict.fromkeys(r.limits for r in rows))
    ns = list(dict.fromkeys(r.n for r in rows))
    request_ms, connect_ms = timeouts_ms(args)
    settings = {
        "Ktor": versions.default_release().name,  # the proxy jar's (the pom's)
        "lifetime": "singleton",
        "delay_ms": args.delay_ms,
        "N": args.n,
        "sampled at s": args.sample_at,
        "peak sampled every s": PEAK_EVERY_S,
        "fair CLIENT_MAX_CONNECTIONS": args.max_connections,
        "deadline s": args.deadline,
        "proxy request and connect timeouts s": f"{request_ms / 1000:g}, {connect_ms / 1000:g}",
        "proxy JVM options": args.java_opts,
    }
    charts = []
    for lim in limits:
        sub = [r for r in rows if r.limits == lim]
        for name, key, digits, title in (
            ("unparked", "unparked_added", 0, f"Active unparked threads added at {args.sample_at:g} s"),
            (
                "completion",
                "completion_s",
                1,
                f"Seconds until the last of N answers ({args.delay_ms} ms each)",
            ),
        ):
            series = {f"N={n}": [machinery.find(sub, key, engine=e, n=n) for e in engines] for n in ns}
            bars = render.bars(f"{title}, {lim} limits", engines, series, digits=digits)
            charts.append((f"threads-{name}-{lim}.svg", bars))
    return machinery.Report(
        "Threads per engine: N requests in flight to a slow upstream",
        settings,
        [
            (f"{lim} limits", machinery.table(columns(args.sample_at), [r for r in rows if r.limits == lim]))
            for lim in limits
        ],
        charts,
    )


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    p.add_argument(
        "--n", default="100,500,1000", help="requests in flight, comma-separated (default: %(default)s)"
    )
    p.add_argument("--limits", default="defaults,fair", help="defaults, fair or both (default: %(default)s)")
    p.add_argument("--delay-ms", type=int, default=2000, help="upstream answer delay (default: %(default)s)")
    p.add_argument("--sample-at", type=float, default=1.0, help="seconds after the burst to count threads")
    p.add_argument("--max-connections", type=int, default=1000, help="the fair limit (default: %(default)s)")
    p.add_argument(
        "--deadline",
        type=float,
        default=120,
        help="seconds a burst may take before it is cut short and reported unfinished (default: %(default)s)",
    )
    p.add_argument(
        "--connect-timeout-ms",
        type=int,
        default=0,
        help="the proxy's connect timeout; 0 (default) = as long as the deadline, so requests queued for "
        "a connection wait instead of failing (CIO counts that wait as connecting)",
    )
    p.add_argument("--java-opts", default="-Xmx512m", help="proxy JVM options (default: %(default)s)")


STUDY = machinery.Study(
    name="threads",
    help="N requests at once to a 2 s upstream per engine: threads at 1 s, completion, waves",
    add_options=add_options,
    plan=plan,
    parts=parts,
    measure=measure,
    report=report,
    progress=progress,
    claim="The thread-count study sent 500 requests at once to a server answering after 2 s and counted "
    "threads: OkHttp (and Retrofit, Fuel) blocked a thread per request, Java and CIO used about one, and "
    "CIO took 11 s.",
)
