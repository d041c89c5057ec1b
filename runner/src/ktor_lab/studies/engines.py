"""`lab study engines`: each engine's own throughput, in-process, without the proxy.

Ktor's client benchmark, corrected: a fresh JVM per engine, client and mode runs
`bench/engine-bench/target/engine-bench.jar` (the module bench/engine-bench/) against nginx on loopback:
unmeasured batches, then 10 batches x 1000 requests behind a real limit of 100 in flight, with
every request's latency and the JVM's CPU per request. The same engine "as published" (all 1000 of
a batch launched at once) runs beside it, so the difference between the two designs is on the page.

Beside the lab's client, each engine runs its references, written without any of the lab's code
(bench/plain-client/): `plain` (the engine's defaults, `client.get(url).bodyAsText()`) and
`plain-limits` (only the lab's connection limit); the lab's rows show their ratios to both.
`--ladder` climbs instead from `plain-limits` to the lab's client one setting at a time (LADDER).
`--repeats` interleaves every run (A B A B); ratios are medians of those taken within a round.
`--cio-pipelining` adds CIO's clients with pipelining on. nginx's log counts the new connections
each JVM opened (warm-up included), per request. `--ktor A,B` runs every client on each release,
interleaved within a round, with ratios to A's; a release that builds the clients only (Ktor 3.6.1
here, `lab.modules=clients`) runs the references alone: it has no lab's client.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from .. import render, versions
from ..backends import Backend
from ..cases import ENGINE_FACTS, Case, engine_list
from ..machine import java
from . import machinery

# The clients each engine runs, by name, with engine-bench's options: the lab's, and the references.
CLIENTS = (
    ("lab", ()),
    ("plain", ("--client", "plain")),
    ("plain-limits", ("--client", "plain-limits")),
)
# From the plain client with the lab's limit to the lab's client, one setting at a time
# (engine-bench's --parts and --read; EngineSetup.kt's ClientPart).
LADDER = (
    ("plain", ("--client", "plain")),
    ("plain-limits", ("--client", "plain-limits")),
    ("plain-limits, read raw", ("--client", "plain-limits", "--read", "raw")),
    ("lab's code: limits", ("--parts", "limits", "--read", "raw")),
    ("+ flags (no redirects, no transformers)", ("--parts", "limits,flags", "--read", "raw")),
    ("+ engine settings (pool, retry, HTTP version)", ("--parts", "limits,flags,engine", "--read", "raw")),
    ("+ timeouts on the engine's knobs", ("--parts", "limits,flags,engine,timeouts", "--read", "raw")),
    (
        "+ timeouts by HttpTimeout instead",
        ("--parts", "limits,flags,engine,timeouts-plugin", "--read", "raw"),
    ),
    ("+ streaming (execute {}): the lab's client", ("--parts", "all", "--read", "stream")),
)
BASE = "plain-limits"
# CIO with pipelining on (`--cio-pipelining`): the lab's client and the reference with the lab's limit.
PIPELINED = (
    ("lab, pipelining", ("--pipelining", "on")),
    ("plain-limits, pipelining", ("--client", "plain-limits", "--pipelining", "on")),
)
# nginx writes its connection log within a second (flush=1s): read it this long after a JVM ends.
LOG_FLUSH_S = 1.2
# For a dry run's estimate: the fewest requests per second a run should make. The slowest batch
# measured was about 1,450 rps (CIO, all of a batch at once; docs/studies/engines/); the cold
# unmeasured batches are slower, so about two thirds of it.
MIN_RPS = 1000
# Seconds a benchmark's JVM takes beyond its requests: its start, the client made, its JSON written.
JVM_START_S = 3


@dataclass(frozen=True)
class Bench:
    """One run of the plan: one engine and client in a fresh JVM, with a limit in flight (0: the
    whole batch), in a round of the repeats."""

    engine: str
    concurrency: int
    client: str = "lab"
    options: tuple[str, ...] = ()
    repeat: int = 1
    ktor: str = ""  # a release of --ktor; "" for the engine's own
    _: KW_ONLY  # engine-bench's batches (unmeasured, then measured, of batch_size requests each)
    warmup_batches: int
    batches: int
    batch_size: int
    timeout: int  # the most seconds its JVM may run

    KIND: ClassVar[str] = "benchmark"  # its dry run's line
    EACH: ClassVar[str] = "engines x modes x clients x rounds, a JVM each"

    def planned_seconds(self) -> float:
        """The most it should take: a JVM (JVM_START_S) making (warm-up + measured batches) x
        batch size requests at MIN_RPS at least; never past the timeout, where it is stopped."""
        requests = (self.warmup_batches + self.batches) * self.batch_size
        return min(self.timeout, JVM_START_S + requests / MIN_RPS)


@dataclass
class BenchRow:
    """What the benchmark printed (`output`, as results.json always held it), and what the tables use."""

    engine: str
    concurrency: int
    mode: str
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    failures: int
    batch_rps_min: float
    batch_rps_max: float
    batch_rps_median: float
    ktor_version: str
    client: str = "lab"
    repeat: int = 1
    cpu_ms_per_request: float | None = None
    # New connections nginx logged while the JVM ran, over every request it made (warm-up too).
    connections_per_request: float | None = None
    timeouts: int = 0  # of the failures, requests without their whole answer within the request timeout
    output: dict = field(default_factory=dict)
    # Medians over the repeats and the ratios to the references (filled by summarize, one row per client).
    rounds: int = 1
    rps_to_plain_limits: float | None = None
    rps_to_plain: float | None = None
    cpu_to_plain_limits: float | None = None
    # To the same engine, mode and client on --ktor's first release (with two releases or more).
    rps_to_first_release: float | None = None
    cpu_to_first_release: float | None = None

    def to_json(self) -> dict:
        own = asdict(self)
        return {**own.pop("output"), **own}


def release_for(ktor: str, engine: str) -> versions.Release:
    """The release `engine` runs on: `ktor`, else the engine's own (the default, or the apache
    engine's last, 3.4.1); ValueError when `ktor` does not publish it. In-process, no proxy: a
    clients-only release will do."""
    return versions.release_of(Case("singleton", engine, ktor=ktor))


def jar(bench: Bench) -> Path:
    """The benchmark's jar for the run, built on first use or when older than its sources."""
    return versions.ensure_jar("engine-bench", release_for(bench.ktor, bench.engine))


def clients_of(args: argparse.Namespace, ktor: str, engine: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The clients `engine` runs: the lab's beside the references (or the ladder), CIO's pipelined
    ones with --cio-pipelining; the references alone on a release that builds no lab's client."""
    clients = (LADDER if args.ladder else CLIENTS) + (
        PIPELINED if args.cio_pipelining and engine == "cio" else ()
    )
    rel = release_for(ktor, engine)
    if rel.builds_proxy:
        return clients
    if args.ladder:
        raise ValueError(
            f"--ladder climbs to the lab's client, which Ktor {rel.name} does not build (its release builds "
            "the clients only): drop --ladder"
        )
    return tuple((name, options) for name, options in clients if not name.startswith("lab"))


def plan(args: argparse.Namespace) -> list[Bench]:
    releases = [versions.release(k).name for k in versions.names(args.ktor)] or [""]  # or a ValueError
    runs = []  # (release, engine) that can run: an engine a release lacks is skipped by name
    for ktor in releases:
        for engine in engine_list(args.engines):
            try:
                release_for(ktor, engine)
                runs.append((ktor, engine))
            except ValueError as e:
                print(f"lab study engines: skips {engine}: {str(e).split('; ')[0]}", flush=True)
    if not runs:
        raise ValueError(f"no engine of --engines can run on Ktor {args.ktor}")
    modes = [args.concurrency] + ([0] if args.as_published else [])
    batches = {k: getattr(args, k) for k in ("warmup_batches", "batches", "batch_size", "timeout")}
    order = [e for e in dict.fromkeys(e for _, e in runs)]
    return [
        Bench(engine, concurrency, client, options, repeat, ktor, **batches)
        for repeat in range(1, args.repeats + 1)
        for concurrency in modes
        for engine in order
        for client, options in clients_of(args, "", engine)
        for ktor in releases
        if (ktor, engine) in runs and (client, options) in clients_of(args, ktor, engine)
    ]


def mode_name(concurrency: int, batch_size: int) -> str:
    return f"all {batch_size} at once (as published)" if concurrency == 0 else f"limit {concurrency}"


def measure(lab: Backend, bench: Bench, args: argparse.Namespace) -> list[BenchRow]:
    url = lab.upstream_url + args.path
    name = f"{bench.engine}-{bench.concurrency}-{_slug(bench.client)}-{bench.repeat}"
    log = lab.run_dir / f"engine-{name}{'-' + bench.ktor if bench.ktor else ''}.log"
    argv = [
        java(),
        *args.java_opts.split(),
        "-jar",
        str(jar(bench)),
        *("--engine", bench.engine, "--url", url),
        *("--batches", str(bench.batches), "--batch-size", str(bench.batch_size)),
        *("--concurrency", str(bench.concurrency), "--warmup-batches", str(bench.warmup_batches)),
        *("--request-timeout-ms", str(args.request_timeout_ms)),
        *bench.options,
    ]
    since = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=bench.timeout)
    until = time.time()
    log.write_text(f"$ {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"engine benchmark {bench.engine} exited with {r.returncode}:\n{r.stderr[-2000:]}")
    out = json.loads(lines[-1])
    batch_rps = [b["rps"] for b in out["batches"]]
    time.sleep(LOG_FLUSH_S)
    opened = lab.connections(since, until)
    made = (bench.warmup_batches + bench.batches) * bench.batch_size
    return [
        BenchRow(
            engine=bench.engine,
            concurrency=bench.concurrency,
            mode=mode_name(bench.concurrency, bench.batch_size),
            **{
                k: out[k] for k in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms", "failures", "ktor_version")
            },
            batch_rps_min=min(batch_rps),
            batch_rps_max=max(batch_rps),
            batch_rps_median=statistics.median(batch_rps),
            client=bench.client,
            repeat=bench.repeat,
            cpu_ms_per_request=out.get("cpu_ms_per_request"),
            connections_per_request=None if opened is None else len(opened) / made,
            timeouts=out.get("timeouts", 0),
            output=out,
        )
    ]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")[:40]


def progress(r: BenchRow) -> str:
    cpu = f", CPU {r.cpu_ms_per_request:.3f} ms/req" if r.cpu_ms_per_request is not None else ""
    conns = (
        "" if r.connections_per_request is None else f", {r.connections_per_request:.3f} new connections/req"
    )
    return (
        f"{r.engine:8} {r.ktor_version} {r.mode} {r.client} #{r.repeat}: {r.rps:,.0f} rps, "
        f"p50 {r.p50_ms:.1f} ms, "
        f"p99 {r.p99_ms:.1f} ms{cpu}, {r.failures} errors{conns}"
    )


def key_of(r: BenchRow) -> tuple:
    """What one row of the tables is: an engine, a mode, a client, a release."""
    return (r.engine, r.concurrency, r.client, r.ktor_version)


def summarize(rows: list[BenchRow], first: str = "") -> list[BenchRow]:
    """One row per engine, mode, client and release: the median over the repeats (rps, CPU per
    request, latency), and the ratios to the references and to the first release as medians of the
    ratios within each round."""
    out = []
    first = first or (rows[0].ktor_version if rows else "")  # --ktor's first, the base of the ratios
    several = len({r.ktor_version for r in rows}) > 1
    for key in dict.fromkeys(map(key_of, rows)):
        runs = [r for r in rows if key_of(r) == key]
        row = replace(
            runs[0],
            **{a: machinery.median_of(getattr(r, a) for r in runs) for a in MEDIANS},
            failures=sum(r.failures for r in runs),
            timeouts=sum(r.timeouts for r in runs),
            batch_rps_min=min(r.batch_rps_min for r in runs),
            batch_rps_max=max(r.batch_rps_max for r in runs),
            rounds=len(runs),
        )
        row.rps_to_plain_limits = ratio_to("rps", runs, rows, client=BASE)
        row.rps_to_plain = ratio_to("rps", runs, rows, client="plain")
        row.cpu_to_plain_limits = ratio_to("cpu_ms_per_request", runs, rows, client=BASE)
        if several:
            row.rps_to_first_release = ratio_to("rps", runs, rows, ktor_version=first)
            row.cpu_to_first_release = ratio_to("cpu_ms_per_request", runs, rows, ktor_version=first)
        out.append(row)
    return out


# The figures summarize gives as their median over the repeats.
MEDIANS = ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms", "cpu_ms_per_request", "connections_per_request")


def ratio_to(attr: str, runs: list[BenchRow], rows: list[BenchRow], **base: object) -> float | None:
    """The median over the rounds of `runs` (one row of the tables) of `attr` over the same round's
    run of the same row but for `base` (client=..., or ktor_version=...); None for the base itself,
    or where it has no such figure."""
    first = runs[0]
    if all(getattr(first, k) == v for k, v in base.items()):
        return None
    want = replace(first, **base)
    refs = {r.repeat: r for r in rows if key_of(r) == key_of(want)}
    values = [
        getattr(r, attr) / getattr(ref, attr)
        for r in runs
        if (ref := refs.get(r.repeat)) is not None and getattr(ref, attr) and getattr(r, attr) is not None
    ]
    return statistics.median(values) if values else None


COLUMNS = [
    render.Column("engine", lambda r: r.engine),
    render.Column("ktor", lambda r: r.ktor_version),
    render.Column("in flight", lambda r: r.mode),
    render.Column("client", lambda r: r.client),
    render.Column("rps", lambda r: r.rps),
    render.Column("rps x plain-limits", lambda r: r.rps_to_plain_limits, 2),
    render.Column("rps x plain", lambda r: r.rps_to_plain, 2),
    render.Column("CPU ms / req", lambda r: r.cpu_ms_per_request, 3),
    render.Column("CPU x plain-limits", lambda r: r.cpu_to_plain_limits, 2),
    render.Column("batch rps min-max", lambda r: f"{r.batch_rps_min:,.0f}-{r.batch_rps_max:,.0f}"),
    render.Column("p50 ms", lambda r: r.p50_ms, 1),
    render.Column("p90 ms", lambda r: r.p90_ms, 1),
    render.Column("p99 ms", lambda r: r.p99_ms, 1),
    render.Column("max ms", lambda r: r.max_ms, 1),
    render.Column("new conns / req", lambda r: r.connections_per_request, 3),
    render.Column("errors", lambda r: r.failures),
    render.Column("timeouts", lambda r: r.timeouts),
]
# With two releases or more: each row to the same one on the first.
RELEASE_COLUMNS = [
    render.Column("rps x first release", lambda r: r.rps_to_first_release, 2),
    render.Column("CPU x first release", lambda r: r.cpu_to_first_release, 2),
]


def charts_of(rows: list[BenchRow], args: argparse.Namespace, engines: list, modes: list) -> list:
    """rps and p99 per engine and mode: the lab's client (also the ladder's last rung); the
    reference with the lab's limit where a release has no lab's client, a bar per release."""
    releases = list(dict.fromkeys(r.ktor_version for r in rows))
    every = all(any(r.client == "lab" and r.ktor_version == k for r in rows) for k in releases)
    client = LADDER[-1][0] if args.ladder else "lab" if every else BASE
    charts = []
    for name, key, digits, title in (
        ("rps", "rps", 0, f"Requests per second, in-process, no proxy ({client})"),
        ("p99", "p99_ms", 1, f"p99 latency (ms), from the moment a request may start ({client})"),
    ):
        series = {
            mode_name(c, args.batch_size) + (f", Ktor {k}" if len(releases) > 1 else ""): [
                machinery.find(rows, key, engine=e, concurrency=c, client=client, ktor_version=k)
                for e in engines
            ]
            for c in modes
            for k in releases
        }
        charts.append((f"engines-{name}.svg", render.bars(title, engines, series, digits=digits)))
    return charts


def report(runs: list[BenchRow], args: argparse.Namespace) -> machinery.Report:
    rows = summarize(runs, (versions.names(args.ktor) or [""])[0])
    engines = list(dict.fromkeys(r.engine for r in rows))
    modes = list(dict.fromkeys(r.concurrency for r in rows))
    settings = {
        "target": f"nginx on 127.0.0.1, GET {args.path}",
        "batches": f"{args.warmup_batches} unmeasured, then {args.batches} measured"
        f" x {args.batch_size} requests",
        "limit in flight": args.concurrency,
        "request timeout": f"{args.request_timeout_ms} ms (a failure, counted as a timeout too)",
        "clients": "lab: the proxy's ClientFactory, fair limits (CLIENT_MAX_CONNECTIONS=1000); "
        "plain: HttpClient(Engine) { expectSuccess = false }, the engine's defaults; plain-limits: the same "
        "with only the lab's limit (bench/plain-client/, none of the lab's code); one client per JVM"
        + ("; ..., pipelining: CIO's pipelining on" if args.cio_pipelining else ""),
        "repeats": f"{args.repeats}, interleaved; ratios are medians of those within a round",
        "JVM options": args.java_opts,
        "ktor": ", ".join(dict.fromkeys(r.ktor_version for r in rows))
        + (" (ratios to the first, within each round)" if len({r.ktor_version for r in rows}) > 1 else ""),
    }

    charts = charts_of(rows, args, engines, modes)
    if args.ladder:
        tables = [
            (f"{e}: the plain client with the lab's limit up to the lab's, {mode_name(c, args.batch_size)}",
             machinery.table(LADDER_COLUMNS, [r for r in rows if r.engine == e and r.concurrency == c]))
            for c in modes
            for e in engines
        ]  # fmt: skip
        title = "In-process engine throughput: the lab's client, one setting at a time"
    else:
        several = len({r.ktor_version for r in rows}) > 1
        tables = [("Per engine", machinery.table(COLUMNS + (RELEASE_COLUMNS if several else []), rows))]
        title = "In-process engine throughput: batches behind a real concurrency limit"
    return machinery.Report(
        title, settings, tables, charts, notes=[f"{e}: {ENGINE_FACTS[e]}" for e in engines]
    )


LADDER_COLUMNS = [
    render.Column("rung", lambda r: r.client),
    render.Column("rps", lambda r: r.rps),
    render.Column("rps x plain-limits", lambda r: r.rps_to_plain_limits, 2),
    render.Column("CPU ms / req", lambda r: r.cpu_ms_per_request, 3),
    render.Column("CPU x plain-limits", lambda r: r.cpu_to_plain_limits, 2),
    render.Column("p50 ms", lambda r: r.p50_ms, 1),
    render.Column("p99 ms", lambda r: r.p99_ms, 1),
    render.Column("errors", lambda r: r.failures),
]


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    p.add_argument("--batches", type=int, default=10, help="measured batches (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=1000, help="requests per batch (default: %(default)s)")
    p.add_argument(
        "--concurrency", type=int, default=100, help="requests in flight at most (default: %(default)s)"
    )
    p.add_argument(
        "--warmup-batches", type=int, default=20, help="unmeasured batches first (default: %(default)s)"
    )
    p.add_argument(
        "--as-published",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run each engine the published way, a whole batch at once (default: on)",
    )
    p.add_argument(
        "--path", default="/files/tiny.txt", help="what each request fetches (default: %(default)s)"
    )
    p.add_argument("--java-opts", default="-Xmx512m", help="JVM options (default: %(default)s)")
    p.add_argument(
        "--ktor",
        default="",
        help="Ktor releases of ktor-releases.tsv, comma-separated, each run in every round "
        "(default: the pom's; a clients-only one runs the references alone)",
    )
    p.add_argument(
        "--timeout", type=int, default=600, help="most seconds per engine run (default: %(default)s)"
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=5000,
        help="a request without its whole answer by then is a failure and a timeout (default: %(default)s)",
    )
    p.add_argument(
        "--repeats", type=int, default=1, help="rounds over every run, interleaved (default: %(default)s)"
    )
    p.add_argument(
        "--cio-pipelining",
        action="store_true",
        help="also run CIO's lab client and plain-limits with pipelining on (CLIENT_PIPELINING=on)",
    )
    p.add_argument(
        "--ladder",
        action="store_true",
        help="from the plain client with the lab's limit to the lab's client, one setting at a time, "
        "instead of the lab's client beside its references",
    )


STUDY = machinery.Study(
    name="engines",
    help="each engine in-process against nginx: batches behind a real limit",
    add_options=add_options,
    plan=plan,
    parts=machinery.proxies,  # nginx alone: the JMH jars are the clients, no proxy starts
    measure=measure,
    report=report,
    progress=progress,
    claim='Ktor\'s own client benchmark runs 10 batches of 1000 requests "with 100 concurrent" per engine '
    "and reports requests per second; it launches all 1000 at once, has no warm-up and reports rps only, "
    "no percentiles.",
)
