"""`lab study distance`: what the distance to the upstream does to each engine and lifetime.

On loopback a new connection costs nothing, so a per-call client and CIO without pipelining look
cheap. This study puts a network between the proxy and nginx (Toxiproxy: an added round trip of
0, 1, 20 and 80 ms, an availability zone to the internet) and runs every case at each distance, over
HTTP and HTTPS, at one fixed rate with enough users that a slow case shows as latency and errors,
not as a lower offered rate. Beside it, singleton CIO with pipelining on. It is two `lab run`
matrices (their lab reports are in runs-cases/ and runs-pipelining/); this module turns their runs
into the tables and the verdict: latency above the round trip, CPU per request, threads,
connections per 1,000 requests.

Toxiproxy's TCP handshake is local: a new connection's own round trip is added as a model (new
connections per request x RTT, docs/network.md); TLS handshakes cross the network and are measured.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import render, verdict, versions
from ..cases import BY_FIELD, LIFETIMES, PROTOCOLS, Case, engine_list
from ..commands import options
from ..plan import Plan, parse_load
from ..results import Results, Run
from . import machinery

RTTS = "0,1,20,80"
PIPELINING = "pipelining"
# singleton vs per-call "stops being a detail" once per-call costs this much more per request
# (its mean latency with its connections' round trips, over the singleton's), in ms and share.
DETAIL_MS = 5.0
DETAIL_SHARE = 0.25
# Threads "grow with latency" when the farthest distance has this many more active threads (above
# the idle proxy's, on average) than the nearest, and this share more.
GROWTH_THREADS = 2
GROWTH_SHARE = 0.5


@dataclass(frozen=True)
class Matrices:
    whole: Plan
    cases: Plan
    pipelining: Plan | None

    def named_plans(self) -> list[tuple[str, Plan]]:
        """The lab runs it makes, by name (its dry run's lines)."""
        return [("cases", self.cases), *([("pipelining", self.pipelining)] if self.pipelining else [])]


@dataclass
class Row:
    """One case (or CIO with pipelining) at one distance over one protocol: its run's figures."""

    case: str
    variant: str  # "" or "pipelining"
    protocol: str
    rtt_ms: int
    target_rps: float
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    avg_ms: float | None
    failures: int
    requests: int
    cpu_per_1000: float | None
    # The same without the JIT compiler threads' CPU in the window: at a low fixed rate the JIT is
    # still compiling after the warm-up, and its share is the larger part (none: not seen)
    cpu_per_1000_without_jit: float | None
    threads_max: float | None
    active_threads: float | None  # active unparked threads on average over the window, above the idle proxy's
    threads_per_in_flight: float | None
    in_flight_mean: float | None
    conns_per_1000: float | None
    full_tls_per_1000: float | None
    connect_rtt_ms: float | None
    time_wait_max: float | None
    pool_in_use_max: float | None
    flags: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.case} ({self.variant})" if self.variant else self.case

    @property
    def above_floor_ms(self) -> float | None:
        """p50 less the round trip every request pays at least once (its request and answer)."""
        return None if self.p50_ms is None else self.p50_ms - self.rtt_ms

    @property
    def mean_with_connect_ms(self) -> float | None:
        """Mean latency with the new connections' own round trips, which Toxiproxy does not delay."""
        if self.avg_ms is None:
            return None
        return self.avg_ms + (self.connect_rtt_ms or 0.0)

    @property
    def error_share(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "above_floor_ms": self.above_floor_ms,
            "mean_with_connect_ms": self.mean_with_connect_ms,
        }


def matrices(args: argparse.Namespace) -> Matrices:
    engines = engine_list(args.engines)
    lifetimes = args.lifetimes.split(",")
    if bad := [x for x in lifetimes if x not in LIFETIMES]:
        raise ValueError(f"--lifetimes: {bad[0]!r} is not one of {', '.join(LIFETIMES)}")
    cases = [Case(lifetime, engine) for lifetime in lifetimes for engine in engines]
    protocols = versions.names(args.protocols)
    if bad := [p for p in protocols if p not in PROTOCOLS]:
        raise ValueError(f"protocol {bad[0]!r}: give some of {', '.join(PROTOCOLS)}")
    rtt = options.rtt_list(args.rtt)
    load = parse_load(args.load)
    if load.model != "rate":
        raise ValueError(
            f"--load {args.load!r}: give a fixed rate (rate/RPS/USERS), so a slow case shows as latency"
        )

    def matrix(of: list[Case], env: dict[str, str] | None = None) -> Plan:
        return machinery.runs_plan(
            args,
            of,
            ["static-small"],
            [load],
            proxy_env=env or {},
            dims={"protocol": protocols, "rtt_ms": rtt},
        )

    pipelined = [Case("singleton", "cio")] if args.pipelining else []
    return Matrices(
        matrix(cases + pipelined),
        matrix(cases),
        matrix(pipelined, {"CLIENT_PIPELINING": "on"}) if pipelined else None,
    )


def plan(args: argparse.Namespace) -> list[Matrices]:
    return [matrices(args)]


def rows_of(results: Results) -> list[Row]:
    for r in results.runs:
        r.verdict = verdict.judge(r)
    return [row_of(r) for r in results.runs]


def row_of(r: Run) -> Row:
    c = r.connections
    return Row(
        case=r.case,
        variant=PIPELINING if r.proxy.settings.get("pipelining") == "on" else "",
        protocol=r.dim("protocol"),
        rtt_ms=r.dim("rtt_ms"),
        target_rps=r.load.target_rps,
        rps=r.locust.rps,
        p50_ms=r.locust.p50_ms,
        p99_ms=r.locust.p99_ms,
        avg_ms=r.locust.avg_ms,
        failures=r.locust.failures,
        requests=r.locust.requests,
        cpu_per_1000=r.proxy.cpu_seconds_per_1000_requests,
        cpu_per_1000_without_jit=without_jit(r),
        threads_max=r.prometheus.threads_live_max,
        active_threads=active_above_idle(r),
        threads_per_in_flight=c and c.threads_per_in_flight,
        in_flight_mean=c and c.in_flight_mean,
        conns_per_1000=c and c.per_1000_requests,
        full_tls_per_1000=c and c.full_tls_per_1000_requests,
        connect_rtt_ms=c and c.connect_rtt_ms_per_request,
        time_wait_max=r.prometheus.time_wait_max,
        pool_in_use_max=r.prometheus.pool_in_use_max,
        flags=list(r.verdict.flags),
    )


def without_jit(r: Run) -> float | None:
    """The proxy's CPU s per 1,000 upstream requests less its JIT compiler threads' CPU in the window."""
    jit, requests = r.proxy.jit_cpu_seconds_in_window, r.proxy.upstream_requests
    if jit is None or not requests or r.proxy.cpu_seconds_per_1000_requests is None:
        return None
    return round(max(0.0, r.proxy.cpu_seconds - jit) / requests * 1000, 2)


def active_above_idle(r: Run) -> float | None:
    mean, idle = (
        r.prometheus.threads_active_unparked_mean,
        r.connections and r.connections.threads_unparked_idle,
    )
    return None if mean is None or idle is None else round(max(0.0, mean - idle), 1)


def measure(d: Path, m: Matrices, args: argparse.Namespace) -> list[Row]:
    """The two matrices on one set of parts, each with its own lab report (runs-cases/ and
    runs-pipelining/: a pipelined singleton CIO is not the same row as the default one)."""
    parts = [(m.cases, d / "runs-cases")] + ([(m.pipelining, d / "runs-pipelining")] if m.pipelining else [])
    print(f"lab study distance: {sum(len(p.runs()) for p, _ in parts)} runs", flush=True)
    return [row for results in machinery.run_matrices(m.whole, parts, d) for row in rows_of(results)]


def progress(r: Row) -> str:
    return (
        f"{r.name} {r.protocol} RTT {r.rtt_ms} ms: {r.rps:.0f} rps, p50 {fmt(r.p50_ms)} ms, "
        f"{fmt(r.conns_per_1000)} new conns / 1k, threads {fmt(r.threads_max)}"
    )


def fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


# --- the tables --------------------------------------------------------------------------------


def grid(rows: list[Row], protocol: str) -> tuple[list[str], list[int], dict[tuple[str, int], Row]]:
    """The names (cases in order, variants after), the distances, and each (name, rtt)'s row."""
    mine = [r for r in rows if r.protocol == protocol]
    names = list(dict.fromkeys(r.name for r in sorted(mine, key=lambda r: r.variant != "")))
    rtts = sorted({r.rtt_ms for r in mine})
    return names, rtts, {(r.name, r.rtt_ms): r for r in mine}


def figure_table(rows: list[Row], protocol: str, cell) -> str:
    """One row per case, one column per distance; `cell(row)` is the text of one."""
    names, rtts, at = grid(rows, protocol)
    columns = [render.Column("case", lambda n: n)]
    for rtt in rtts:
        columns.append(
            render.Column(f"RTT {rtt} ms", lambda n, rtt=rtt: cell(at[(n, rtt)]) if (n, rtt) in at else "-")
        )
    return render.Table(columns, names, numeric=[False, *[True] * len(rtts)]).markdown()


def latency_cell(r: Row) -> str:
    text = f"{fmt(r.above_floor_ms)} / {fmt(r.mean_with_connect_ms)}"
    return text + (f" ({r.error_share:.1%} failed)" if r.failures else "")


def threads_cell(r: Row) -> str:
    return f"{fmt(r.threads_max, 0)} / {fmt(r.active_threads)} / {fmt(r.threads_per_in_flight, 2)}"


def conns_cell(r: Row) -> str:
    tls = f", {fmt(r.full_tls_per_1000, 0)} full TLS" if r.full_tls_per_1000 is not None else ""
    return f"{fmt(r.conns_per_1000, 0)}{tls}; TW {fmt(r.time_wait_max, 0)}"


def cpu_cell(r: Row) -> str:
    held = "" if "target" in r.flags else f" (held {r.rps:,.0f} of {r.target_rps:,.0f} rps)"
    return f"{fmt(r.cpu_per_1000, 2)} / {fmt(r.cpu_per_1000_without_jit, 2)}{held}"


TABLES = [
    (
        "Latency: p50 above the round trip / mean with the connections' own round trips (ms)",
        latency_cell,
    ),
    ("p99 (ms)", lambda r: fmt(r.p99_ms)),
    ("Threads: live max / active above idle (mean) / active per request in flight", threads_cell),
    (
        "New connections per 1,000 requests (and full TLS handshakes); proxy sockets in TIME_WAIT (max)",
        conns_cell,
    ),
    (
        "Proxy CPU s per 1,000 requests / the same without the JIT compiler's (and the rate, when it was "
        "not held)",
        cpu_cell,
    ),
]


# --- the verdict in words ------------------------------------------------------------------------


def by(rows: list[Row], protocol: str) -> dict[tuple[str, int], Row]:
    return {(r.name, r.rtt_ms): r for r in rows if r.protocol == protocol}


def detail_lines(rows: list[Row], protocol: str) -> list[str]:
    """Per engine: from which distance per-call costs more than a detail over the singleton."""
    at = by(rows, protocol)
    rtts = sorted({rtt for _, rtt in at})
    out = []
    for engine in dict.fromkeys(Case.parse(r.case).engine for r in rows):
        pairs = [(at.get((f"singleton-{engine}", t)), at.get((f"per-call-{engine}", t)), t) for t in rtts]
        costs = [
            (t, p.mean_with_connect_ms - s.mean_with_connect_ms, s.mean_with_connect_ms)
            for s, p, t in pairs
            if s and p and s.mean_with_connect_ms is not None and p.mean_with_connect_ms is not None
        ]
        if not costs:
            continue
        first = next(
            (t for t, extra, base in costs if extra > DETAIL_MS and extra > DETAIL_SHARE * base), None
        )
        steps = ", ".join(f"+{extra:,.1f} ms at {t} ms" for t, extra, _ in costs)
        when = f"from {first} ms on" if first is not None else "at none of these distances"
        out.append(
            f"{engine}: per-call stops being a detail {when} (per-call over singleton, mean: {steps})."
        )
    return out


def thread_lines(rows: list[Row], protocol: str) -> list[str]:
    """Which cases put more threads to work as the round trip grows (active threads, above the idle
    proxy's, on average: live threads also count what a cold start left idle)."""
    at = by(rows, protocol)
    rtts = sorted({rtt for _, rtt in at})
    if len(rtts) < 2:
        return []
    near, far = rtts[0], rtts[-1]
    grow, flat = [], []
    for name in dict.fromkeys(n for n, _ in at):
        a, b = at.get((name, near)), at.get((name, far))
        if not a or not b or a.active_threads is None or b.active_threads is None:
            continue
        text = f"{name} {a.active_threads:,.1f} -> {b.active_threads:,.1f}"
        if b.threads_per_in_flight is not None:
            text += f" ({b.threads_per_in_flight:.2f} per request in flight at {far} ms)"
        extra = b.active_threads - a.active_threads
        (
            grow if extra >= GROWTH_THREADS and extra >= GROWTH_SHARE * max(a.active_threads, 1) else flat
        ).append(text)
    lines = []
    if grow:
        lines.append(
            f"Threads at work grow with the round trip ({near} -> {far} ms): " + "; ".join(grow) + "."
        )
    if flat:
        lines.append(f"Threads at work hold ({near} -> {far} ms): " + "; ".join(flat) + ".")
    return lines


def cio_lines(rows: list[Row], protocol: str) -> list[str]:
    at = by(rows, protocol)
    rtts = sorted({rtt for _, rtt in at})
    lines = []
    cio = [(t, at.get(("singleton-cio", t))) for t in rtts]
    pooled = [
        (t, min((r for r in (at.get((f"singleton-{e}", t)) for e in ("apache5", "okhttp", "apache")) if r
                 and r.mean_with_connect_ms is not None), key=lambda r: r.mean_with_connect_ms, default=None))
        for t in rtts
    ]  # fmt: skip
    parts = []
    for (t, c), (_, p) in zip(cio, pooled, strict=True):
        if c and p and c.mean_with_connect_ms is not None:
            parts.append(
                f"{t} ms: {c.mean_with_connect_ms:,.1f} ms mean with {fmt(c.conns_per_1000, 0)} new "
                f"connections per 1,000 requests, against {p.mean_with_connect_ms:,.1f} ms for {p.case}"
            )
    if parts:
        lines.append("Singleton CIO (a connection per request): " + "; ".join(parts) + ".")
    piped = [(t, at.get((f"singleton-cio ({PIPELINING})", t))) for t in rtts]
    parts = [
        f"{t} ms: {r.mean_with_connect_ms:,.1f} ms mean, {fmt(r.conns_per_1000, 0)} new connections per 1,000"
        for t, r in piped
        if r and r.mean_with_connect_ms is not None
    ]
    if parts:
        lines.append("With pipelining on: " + "; ".join(parts) + ".")
    return lines


def verdict_lines(rows: list[Row], protocol: str) -> list[str]:
    quiet = {"target", "not-warm", "generator-latency", "leak"}  # expected at a fixed rate, or no rate flag
    flagged = sorted(
        f"{r.name} at {r.rtt_ms} ms ({', '.join(f for f in r.flags if f not in quiet)})"
        for r in rows
        if r.protocol == protocol and set(r.flags) - quiet
    )
    lines = [*detail_lines(rows, protocol), *thread_lines(rows, protocol), *cio_lines(rows, protocol)]
    # At a fixed rate a row without `target` fell short of it: its figures are of the requests that
    # finished, not of the load the others carried.
    short = [
        f"{r.name} at {r.rtt_ms} ms ({r.rps:,.0f} rps, p50 {fmt(r.p50_ms, 0)} ms)"
        for r in rows
        if r.protocol == protocol and "target" not in r.flags
    ]
    if short:
        rate = f"{rows[0].target_rps:,.0f}"
        said = f"Did not hold the {rate} rps (their figures are of the requests that finished): "
        lines.append(said + "; ".join(short) + ".")
    if flagged:
        lines.append("Rows that did not hold the rate cleanly: " + "; ".join(flagged) + ".")
    return lines


# --- the report ----------------------------------------------------------------------------------


def charts(rows: list[Row]) -> list[tuple[str, str]]:
    out = []
    for protocol in dict.fromkeys(r.protocol for r in rows):
        names, rtts, at = grid(rows, protocol)
        out.append(
            (
                f"distance-{protocol}-latency.svg",
                render.bars(
                    f"Mean latency with the connections' round trips (ms), {protocol}, by RTT",
                    names,
                    {
                        f"RTT {t} ms": [
                            at[(n, t)].mean_with_connect_ms if (n, t) in at else None for n in names
                        ]
                        for t in rtts
                    },
                    1,
                    better="lower",
                ),  # fmt: skip
            )
        )
        out.append(
            (
                f"distance-{protocol}-threads.svg",
                render.bars(
                    f"Live threads (max), {protocol}, by RTT",
                    names,
                    {
                        f"RTT {t} ms": [at[(n, t)].threads_max if (n, t) in at else None for n in names]
                        for t in rtts
                    },
                    0,
                    better="lower",
                ),
            )
        )
    return out


def report(rows: list[Row], args: argparse.Namespace) -> machinery.Report:
    m = matrices(args)
    load = m.whole.loads[0]
    tables = []
    for protocol in dict.fromkeys(r.protocol for r in rows):
        tables.append(
            (f"Verdict over {protocol}", "\n".join(f"- {line}" for line in verdict_lines(rows, protocol)))
        )
        for heading, cell in TABLES:
            tables.append((f"{heading}, {protocol}", figure_table(rows, protocol, cell)))
    settings = {
        "cases": ", ".join(c.name for c in m.cases.cases),
        "variant": "singleton-cio with CLIENT_PIPELINING=on" if m.pipelining else "none (--no-pipelining)",
        "round trips (ms)": ", ".join(str(t) for t in m.whole.dims.get("rtt_ms", [])),
        "protocols": ", ".join(m.whole.dims.get("protocol", [])),
        "load": f"{load.describe()} (a request that takes longer than {load.users / load.target_rps:g} s "
        "delays its user's next: then the rate is not held, and the row says so)",
        "per row": f"a proxy of its own, warmed once ({warmed(args)}), a {args.duration} s window",
        "network": "Toxiproxy between the proxy and nginx: half the round trip each way on every chunk; "
        "its TCP handshake is local (a new connection's round trip is modelled: new connections x RTT)",
        "JVM options": args.java_opts,
    }
    notes = [
        "Latency cells: p50 less the RTT (what a request costs beyond the one round trip it cannot avoid) / "
        "the mean with each new connection's TCP handshake added as one round trip (Toxiproxy's handshake is "
        "local; a TLS handshake crosses the network and is in the measured figures already).",
        "Threads cells: live threads (max, which includes what the cold start left idle) / active unparked "
        "threads above the idle proxy's, on average / those per request in flight (Little's law from the "
        "proxy's server timer; - below one request in flight on average).",
        "Connections cells: counted on nginx's side (through Toxiproxy: one of its connections per proxy "
        "connection), alike for every engine; TW: the proxy's sockets to the upstream put in TIME_WAIT "
        "in the window.",
        "At a fixed rate the rps is the target: every row is flagged `target` (not capacity), and many "
        "`not-warm`: at 100 rps the JIT still compiles after minutes of warm-up, so the CPU table "
        "gives the proxy's CPU per request with and without its compiler threads'; latency, threads and "
        "connections are what compare. The lab reports of the runs: runs-cases/ and runs-pipelining/.",
    ]
    return machinery.Report(
        "Distance to the upstream: latency, threads and connections at 0 to 80 ms",
        settings,
        tables,
        charts(rows),
        notes,
    )


def warmed(args: argparse.Namespace) -> str:
    """How each row's proxy was warmed, for the report's settings."""
    first = getattr(args, "warm_first", "none")
    at_rate = f"up to {args.warmup} s at the rate"
    return at_rate if first in (None, "none") else f"up to {args.warmup} s at {first} first, then {at_rate}"


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    machinery.add_lifetimes(p)
    options.add_dimension(p, BY_FIELD["rtt_ms"], default=RTTS)
    options.add_dimension(p, BY_FIELD["protocol"], default="http,https")
    p.add_argument(
        "--load",
        default="rate/100/200",
        help="one fixed rate with enough users for the slowest case (default: %(default)s: 100 rps, "
        "each user every 2 s)",
    )
    p.add_argument(
        "--pipelining",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also singleton CIO with CLIENT_PIPELINING=on (default: on)",
    )
    machinery.add_proxy_runs(p)


STUDY = machinery.Study(
    name="distance",
    help="every case at 0, 1, 20 and 80 ms to the upstream, HTTP and HTTPS: latency, threads, connections",
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="prometheus",  # the runs are lab run's: nginx, the proxy, Locust, Prometheus (and Toxiproxy)
)
