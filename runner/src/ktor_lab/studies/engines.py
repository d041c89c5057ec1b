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
import time
from pathlib import Path

from .. import render, versions
from ..cases import ENGINES
from ..errors import LabError
from ..machine import java
from ..paths import REPO
from ..rundirs import results_dir
from ..stack import Stack
from . import common

NAME = "engines"
JAR = REPO / "engine-bench" / "target" / "engine-bench.jar"


def run_engine(url: str, engine: str, concurrency: int, args, log: Path) -> dict:
    argv = [
        java(),
        *args.java_opts.split(),
        "-jar",
        str(args.jar),
        *("--engine", engine, "--url", url),
        *("--batches", str(args.batches), "--batch-size", str(args.batch_size)),
        *("--concurrency", str(concurrency), "--warmup-batches", str(args.warmup_batches)),
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    log.write_text(f"$ {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"engine benchmark {engine} exited with {r.returncode}:\n{r.stderr[-2000:]}")
    return json.loads(lines[-1])


def mode_name(concurrency: int, batch_size: int) -> str:
    return f"all {batch_size} at once (as published)" if concurrency == 0 else f"limit {concurrency}"


COLUMNS = [
    render.Column("engine", lambda r: r["engine"]),
    render.Column("in flight", lambda r: r["mode"]),
    render.Column("rps", lambda r: r["rps"]),
    render.Column("batch rps min-max", lambda r: f"{r['batch_rps_min']:,.0f}-{r['batch_rps_max']:,.0f}"),
    render.Column("p50 ms", lambda r: r["p50_ms"], 1),
    render.Column("p90 ms", lambda r: r["p90_ms"], 1),
    render.Column("p99 ms", lambda r: r["p99_ms"], 1),
    render.Column("max ms", lambda r: r["max_ms"], 1),
    render.Column("errors", lambda r: r["failures"]),
]


def run(args) -> Path:
    started = time.time()
    engines = args.engines.split(",")
    args.jar = JAR
    if args.ktor:  # another release: its engines only, its own build
        release = versions.release(args.ktor)
        versions.check_cases(release, [f"singleton-{e}" for e in engines])
        args.jar = versions.ensure_jar("engine-bench", release)
    if not args.jar.exists():
        raise LabError(f"{args.jar.relative_to(REPO)} is missing: make build")
    modes = [args.concurrency] + ([0] if args.as_published else [])
    d = results_dir(args.out, NAME)
    logs = d / "logs"
    rows = []
    with Stack(logs) as lab:
        lab.nginx()
        url = lab.upstream_url + args.path
        for concurrency in modes:
            for engine in engines:
                out = run_engine(url, engine, concurrency, args, logs / f"engine-{engine}-{concurrency}.log")
                batch_rps = [b["rps"] for b in out["batches"]]
                row = {
                    **out,
                    "mode": mode_name(concurrency, args.batch_size),
                    "batch_rps_min": min(batch_rps),
                    "batch_rps_max": max(batch_rps),
                    "batch_rps_median": statistics.median(batch_rps),
                }
                rows.append(row)
                print(
                    f"{engine:8} {row['mode']}: {row['rps']:,.0f} rps, p50 {row['p50_ms']:.1f} ms, "
                    f"p99 {row['p99_ms']:.1f} ms, {row['failures']} errors",
                    flush=True,
                )
    settings = {
        "target": f"nginx on 127.0.0.1, GET {args.path}",
        "batches": f"{args.warmup_batches} unmeasured, then {args.batches} measured"
        f" x {args.batch_size} requests",
        "limit in flight": args.concurrency,
        "client": "the proxy's ClientFactory, fair limits (CLIENT_MAX_CONNECTIONS=1000), one client per JVM",
        "JVM options": args.java_opts,
        "ktor": rows[0]["ktor_version"],
    }
    charts = [
        (
            "engines-rps.svg",
            render.bars(
                "Requests per second, in-process, no proxy",
                engines,
                {
                    mode_name(c, args.batch_size): [
                        common.find(rows, "rps", engine=e, concurrency=c) for e in engines
                    ]
                    for c in modes
                },
            ),
        ),
        (
            "engines-p99.svg",
            render.bars(
                "p99 latency (ms), from the moment a request may start",
                engines,
                {
                    mode_name(c, args.batch_size): [
                        common.find(rows, "p99_ms", engine=e, concurrency=c) for e in engines
                    ]
                    for c in modes
                },
                digits=1,
            ),
        ),
    ]
    return common.write(
        d,
        NAME,
        "In-process engine throughput: batches behind a real concurrency limit",
        "lab study engines " + args.argv_text,
        settings,
        rows,
        [("Per engine", common.table(COLUMNS, rows))],
        charts,
        started,
    )


def add_parser(sub) -> None:
    p = sub.add_parser("engines", help="each engine in-process against nginx: batches behind a real limit")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated (default: all five)")
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
    p.add_argument(
        "--out", type=Path, default=None, help="results folder (default: results/study-engines-<time>)"
    )
