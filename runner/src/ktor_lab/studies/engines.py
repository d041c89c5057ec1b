"""`lab study engines`: each engine's own throughput, in-process, without the proxy.

Ktor's client benchmark, corrected: a fresh JVM per engine and mode runs
`engine-bench/target/engine-bench.jar` (the module engine-bench/) against nginx on loopback:
unmeasured batches, then 10 batches x 1000 requests behind a real limit of 100 in flight, with every request's
latency. The same engine "as published" (all 1000 of a batch launched at once) runs beside it,
so the difference between the two designs is on the page.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import render, versions
from ..cases import ENGINES, Case, all_of, engine_list
from ..errors import LabError
from ..machine import java
from ..paths import REPO
from ..stack import Stack
from . import machinery

JAR = REPO / "engine-bench" / "target" / "engine-bench.jar"


@dataclass(frozen=True)
class Bench:
    """One run of the plan: one engine in a fresh JVM, with a limit in flight (0: the whole batch)."""

    engine: str
    concurrency: int


@dataclass
class Row:
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
    output: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        own = asdict(self)
        return {**own.pop("output"), **own}


def jar(args: argparse.Namespace) -> Path:
    """The benchmark's jar: the default build, or another release's (built on first use)."""
    if not args.ktor:
        return JAR
    return versions.ensure_jar("engine-bench", versions.release(args.ktor))


def plan(args: argparse.Namespace) -> list[Bench]:
    engines = engine_list(args.engines)
    if args.ktor:  # another release: its engines only, its own build
        versions.check_cases(versions.release(args.ktor), [Case("singleton", e) for e in engines])
    elif not JAR.exists():
        raise LabError(f"{JAR.relative_to(REPO)} is missing: make build")
    modes = [args.concurrency] + ([0] if args.as_published else [])
    return [Bench(engine, concurrency) for concurrency in modes for engine in engines]


def mode_name(concurrency: int, batch_size: int) -> str:
    return f"all {batch_size} at once (as published)" if concurrency == 0 else f"limit {concurrency}"


def measure(lab: Stack, bench: Bench, args: argparse.Namespace) -> list[Row]:
    url = lab.upstream_url + args.path
    log = lab.run_dir / f"engine-{bench.engine}-{bench.concurrency}.log"
    argv = [
        java(),
        *args.java_opts.split(),
        "-jar",
        str(jar(args)),
        *("--engine", bench.engine, "--url", url),
        *("--batches", str(args.batches), "--batch-size", str(args.batch_size)),
        *("--concurrency", str(bench.concurrency), "--warmup-batches", str(args.warmup_batches)),
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    log.write_text(f"$ {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"engine benchmark {bench.engine} exited with {r.returncode}:\n{r.stderr[-2000:]}")
    out = json.loads(lines[-1])
    batch_rps = [b["rps"] for b in out["batches"]]
    return [
        Row(
            engine=bench.engine,
            concurrency=bench.concurrency,
            mode=mode_name(bench.concurrency, args.batch_size),
            **{
                k: out[k] for k in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms", "failures", "ktor_version")
            },
            batch_rps_min=min(batch_rps),
            batch_rps_max=max(batch_rps),
            batch_rps_median=statistics.median(batch_rps),
            output=out,
        )
    ]


def progress(r: Row) -> str:
    return (
        f"{r.engine:8} {r.mode}: {r.rps:,.0f} rps, p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms, "
        f"{r.failures} errors"
    )


COLUMNS = [
    render.Column("engine", lambda r: r.engine),
    render.Column("in flight", lambda r: r.mode),
    render.Column("rps", lambda r: r.rps),
    render.Column("batch rps min-max", lambda r: f"{r.batch_rps_min:,.0f}-{r.batch_rps_max:,.0f}"),
    render.Column("p50 ms", lambda r: r.p50_ms, 1),
    render.Column("p90 ms", lambda r: r.p90_ms, 1),
    render.Column("p99 ms", lambda r: r.p99_ms, 1),
    render.Column("max ms", lambda r: r.max_ms, 1),
    render.Column("errors", lambda r: r.failures),
]


def report(rows: list[Row], args: argparse.Namespace) -> machinery.Report:
    engines = list(dict.fromkeys(r.engine for r in rows))
    modes = list(dict.fromkeys(r.concurrency for r in rows))
    settings = {
        "target": f"nginx on 127.0.0.1, GET {args.path}",
        "batches": f"{args.warmup_batches} unmeasured, then {args.batches} measured"
        f" x {args.batch_size} requests",
        "limit in flight": args.concurrency,
        "client": "the proxy's ClientFactory, fair limits (CLIENT_MAX_CONNECTIONS=1000), one client per JVM",
        "JVM options": args.java_opts,
        "ktor": rows[0].ktor_version,
    }

    def chart(key: str) -> dict[str, list]:
        return {
            mode_name(c, args.batch_size): [
                machinery.find(rows, key, engine=e, concurrency=c) for e in engines
            ]
            for c in modes
        }

    charts = [
        ("engines-rps.svg", render.bars("Requests per second, in-process, no proxy", engines, chart("rps"))),
        (
            "engines-p99.svg",
            render.bars(
                "p99 latency (ms), from the moment a request may start", engines, chart("p99_ms"), digits=1
            ),
        ),
    ]
    return machinery.Report(
        "In-process engine throughput: batches behind a real concurrency limit",
        settings,
        [("Per engine", machinery.table(COLUMNS, rows))],
        charts,
    )


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated (default: {all_of(ENGINES, 'engines')})",
    )
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
    p.add_argument("--ktor", default="", help="a Ktor release of ktor-releases.tsv (default: the pom's)")
    p.add_argument(
        "--timeout", type=int, default=600, help="most seconds per engine run (default: %(default)s)"
    )


STUDY = machinery.Study(
    name="engines",
    help="each engine in-process against nginx: batches behind a real limit",
    add_options=add_options,
    plan=plan,
    parts=machinery.upstream,
    measure=measure,
    report=report,
    progress=progress,
)
