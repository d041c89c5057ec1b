"""`lab study versions`: what an upgrade of Ktor or of the JDK does to each engine.

Two matrices of `lab run` runs on the native stack, at one fixed load: every case on the first
JDK with each Ktor release (Ktor changed), then every case on the last release with each other
JDK (the JDK changed; its first-JDK runs are the first matrix's). The engines compared are those
every release publishes. Beside them, the io study (JMH: Ktor's socket and file I/O against
plain JVM I/O) for each release. Each change is judged against the spread of the repeats
(run_report.changes); the full lab report of the runs is in runs/ of the study's folder.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .. import measure, render, run_report, versions
from ..backends import NativeBackend
from ..cases import LIFETIMES, case_list
from ..results import Plan, Results, parse_load
from ..rundirs import results_dir
from ..stack import Ports
from . import common, io

NAME = "versions"
NEEDS = "prometheus"  # the runs are lab run's: nginx, the proxy, Locust and Prometheus


def common_cases(releases: list[versions.Release]) -> list[str]:
    """Singleton and per-call of every engine all the releases publish."""
    engines = [e for e in releases[0].engines if all(e in r.engines for r in releases)]
    return [f"{lifetime}-{engine}" for lifetime in LIFETIMES for engine in engines]


def change_rows(results: Results) -> list[dict]:
    rows = []
    for group in run_report.groups(results):
        for c in run_report.changes(group):
            row = {
                "dimension": c.dimension,
                "case": c.case,
                "held": c.same,
                "from": c.before_name,
                "to": c.after_name,
            }
            for key in run_report.CHANGE_FIGURES:
                a, b = c.before.figures[key], c.after.figures[key]
                row[f"{key}_from"], row[f"{key}_to"] = a.median, b.median
                row[f"{key}_change"] = (
                    (b.median - a.median) / a.median if a.median and b.median is not None else None
                )
                clear = c.figure(key)[1]
                row[f"{key}_beyond_spread"] = clear
            row["flags"] = sorted(set(c.before.flags + c.after.flags))
            rows.append(row)
    return rows


def _cell(key: str, digits: int):
    def cell(r: dict) -> str:
        a, b, ch = r[f"{key}_from"], r[f"{key}_to"], r[f"{key}_change"]
        if a is None or b is None:
            return "-"
        mark = {True: " *", False: "", None: ""}[r[f"{key}_beyond_spread"]]
        return f"{a:,.{digits}f} -> {b:,.{digits}f} ({ch:+.1%}){mark}" if ch is not None else f"{a} -> {b}"

    return cell


COLUMNS = [
    render.Column("case", lambda r: r["case"]),
    render.Column("held", lambda r: r["held"]),
    render.Column("change", lambda r: f"{r['from']} -> {r['to']}"),
    render.Column("rps", _cell("rps", 0)),
    render.Column("CPU s / 1000 req", _cell("cpu", 3)),
    render.Column("threads max", _cell("threads", 0)),
    render.Column("heap max MiB", _cell("heap", 0)),
    render.Column("flags", lambda r: ", ".join(r["flags"]) or "-"),
]

IO_COLUMNS = [
    render.Column("Ktor", lambda r: r["ktor"]),
    render.Column("operation", lambda r: r["what"]),
    render.Column("JVM MB/s", lambda r: r["jvm_mb_per_s"]),
    render.Column("Ktor MB/s", lambda r: r["ktor_mb_per_s"]),
    render.Column("Ktor time / JVM time", lambda r: f"{r['ktor_over_jvm_time']:.2f}x"),
]


def run(args) -> Path:
    started = time.time()
    names, java_names = versions.names(args.ktor), versions.names(args.java)
    releases = [versions.release(n) for n in names]
    jdks = [versions.jdk(n) for n in java_names]
    if len(releases) < 2 or len(jdks) < 2:
        raise ValueError("give at least two releases (--ktor) and two JDKs (--java) to compare")
    cases = case_list(args.cases) if args.cases else common_cases(releases)
    for r in releases:
        versions.check_cases(r, cases)
    versions.ensure_jars(releases, ("proxy-app", "io-bench") if args.io else ("proxy-app",))
    d = results_dir(args.out, NAME)
    load = parse_load(args.load)

    def plan(ktor: list[str], java: list[str]) -> Plan:
        return Plan(
            cases, ["static-small"], [load], args.repeats, args.warmup, args.duration, 0, args.java_opts,
            ktor=ktor, java=java,
        )  # fmt: skip

    plans = [("ktor", plan(names, java_names[:1])), ("jdk", plan(names[-1:], java_names[1:]))]
    backend = NativeBackend(d / "logs", Ports.free(), args.java_opts, 0, cases[0])
    parts: list[Results] = []
    try:
        backend.open()
        for name, p in plans:
            print(f"lab study versions: {name} changed: {len(p.runs())} runs", flush=True)
            parts.append(measure.run_plan(p, backend, d / f"runs-{name}"))
    finally:
        backend.close()
    merged = Results(
        plan=plan(names, java_names),
        backend=parts[0].backend,
        environment=parts[0].environment,
        started=parts[0].started,
        finished=parts[-1].finished,
        interrupted=any(p.interrupted for p in parts),
        wall_seconds=round(sum(p.wall_seconds for p in parts), 1),
        runs=[r for p in parts for r in p.runs],
    )
    (d / "runs").mkdir(exist_ok=True)
    merged.write(d / "runs")
    run_report.write_report(d / "runs")
    rows = change_rows(merged)

    io_rows: list[dict] = []
    if args.io:
        io_args = argparse.Namespace(
            size=args.io_size,
            chunk=8192,
            warmup_iterations=args.io_iterations,
            iterations=args.io_iterations,
            iteration_ms=args.io_iteration_ms,
            forks=1,
            timeout=1800,
        )
        for r in releases:
            out = io.jmh(
                io_args, d / f"jmh-{r.name}.json", d / f"jmh-{r.name}.log", jar=versions.jar("io-bench", r)
            )
            io_rows += [{"ktor": r.name, **row} for row in io.rows_from(out, args.io_size)]

    ktor_rows = [r for r in rows if r["dimension"] == "Ktor"]
    jdk_rows = [r for r in rows if r["dimension"] == "JDK"]
    charts = []
    for key, title, digits in [
        ("cpu", "Proxy CPU seconds per 1000 requests", 3),
        ("rps", "Requests per second", 0),
    ]:
        for dim, subset in (("ktor", ktor_rows), ("jdk", jdk_rows)):
            if subset:
                charts.append(
                    (
                        f"versions-{dim}-{key}.svg",
                        render.bars(
                            f"{title}, {subset[0]['dimension']} {subset[0]['from']} vs {subset[0]['to']} "
                            f"({subset[0]['held']})",
                            [r["case"] for r in subset],
                            {
                                subset[0]["from"]: [r[f"{key}_from"] for r in subset],
                                subset[0]["to"]: [r[f"{key}_to"] for r in subset],
                            },
                            digits,
                            better="lower" if key == "cpu" else "higher",
                        ),
                    )
                )
    if io_rows:
        charts.append(
            (
                "versions-io.svg",
                render.bars(
                    "Ktor I/O MB/s per release (JVM I/O beside it), higher is better",
                    [f"{r['what']} (Ktor {r['ktor']})" for r in io_rows],
                    {
                        "JVM": [r["jvm_mb_per_s"] for r in io_rows],
                        "Ktor": [r["ktor_mb_per_s"] for r in io_rows],
                    },
                ),
            )
        )
    settings = {
        "Ktor releases": ", ".join(names),
        "JDKs": ", ".join(f"{j.major} ({j.version}, {j.home})" for j in jdks),
        "cases": ", ".join(cases),
        "load": load.describe(),
        "per run": f"a fresh proxy, warm-up up to {args.warmup} s, a {args.duration} s window, "
        f"{args.repeats} repeat(s) interleaved",
        "JVM options": args.java_opts,
        "io": f"JMH, {args.io_size:,} bytes per operation, {args.io_iterations} iterations of "
        f"{args.io_iteration_ms} ms"
        if args.io
        else "not run (--no-io)",
    }
    notes = [
        "Each cell: the median before -> after, the change in percent; * marks a change beyond the spread "
        "(min-max) of the repeats, which needs --repeats 2 or more.",
        "A row with flags (not-warm, target, ...) does not compare capacity; at a fixed rate below every "
        "case's capacity, rps is the target, and CPU per request, threads and heap are what compare.",
        "The lab report of every run (verdict, tables, settings): runs/report.md and runs/report.html.",
    ]
    tables = [
        (f"Ktor changed ({', '.join(names)}), JDK {java_names[0]}", common.table(COLUMNS, ktor_rows)),
        (f"JDK changed ({', '.join(java_names)}), Ktor {names[-1]}", common.table(COLUMNS, jdk_rows)),
    ]
    if io_rows:
        tables.append(("Ktor I/O against JVM I/O, per release (JMH)", common.table(IO_COLUMNS, io_rows)))
    return common.write(
        d,
        NAME,
        "Ktor release and JDK: what an upgrade changes, per engine",
        "lab study versions " + args.argv_text,
        settings,
        rows + [{"io": True, **r} for r in io_rows],
        tables,
        charts,
        started,
        notes,
    )


def add_parser(sub) -> None:
    p = sub.add_parser("versions", help="Ktor 3.4.0 vs 3.5.1 and JDK 17 vs 25: rps, CPU, threads, heap, I/O")
    releases = [r.name for r in versions.releases()]
    p.add_argument("--ktor", default=",".join(releases), help="releases, oldest first (default: %(default)s)")
    p.add_argument("--java", default="17,25", help="JDKs, the first is the base (default: %(default)s)")
    p.add_argument(
        "--cases",
        default="",
        help="comma-separated (default: both lifetimes of every engine all releases publish)",
    )
    p.add_argument(
        "--load",
        default="rate/200",
        help="one load level, below every case's capacity (default: %(default)s)",
    )
    p.add_argument(
        "--warmup", type=int, default=20, help="most seconds of warm-up per run (default: %(default)s)"
    )
    p.add_argument("--duration", type=int, default=10, help="seconds measured per run (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2, help="runs per cell, interleaved (default: %(default)s)")
    p.add_argument("--java-opts", default="-Xmx512m", help="the proxy's JVM options (default: %(default)s)")
    p.add_argument(
        "--io", action=argparse.BooleanOptionalAction, default=True, help="also the io study per release"
    )
    p.add_argument(
        "--io-size", type=int, default=128 << 20, help="bytes per JMH operation (default: 128 MiB)"
    )
    p.add_argument(
        "--io-iterations", type=int, default=3, help="JMH warm-up and measured iterations (default: 3)"
    )
    p.add_argument(
        "--io-iteration-ms", type=int, default=2000, help="JMH iteration length (default: %(default)s)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="results folder (default: results/study-versions-<time>)"
    )
