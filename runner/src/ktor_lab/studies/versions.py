"""`lab study versions`: what an upgrade of Ktor or of the JDK does to each engine.

Two matrices of `lab run` runs on the native stack, at one fixed load: every case on the first
JDK with each Ktor release (Ktor changed), then every case on the last release with each other
JDK (the JDK changed; its first-JDK runs are the first matrix's). The engines compared are those
every release publishes. Beside them, the io study (JMH: Ktor's socket and file I/O against
plain JVM I/O) for each release. Each change is judged against the spread of the repeats
(conclusions.changes); the full lab report of the runs is in runs/ of the study's folder.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from .. import conclusions, confidence, render, run_report, versions
from ..cases import BY_FIELD, LIFETIMES, Case, case_list
from ..commands import options
from ..plan import Plan, parse_load
from ..results import Results
from . import io, machinery


@dataclass(frozen=True)
class Matrices:
    """The lab runs: Ktor changed on the first JDK, then the JDK changed on the last release."""

    whole: Plan
    ktor: Plan
    jdk: Plan

    def named_plans(self) -> list[tuple[str, Plan]]:
        """The lab runs it makes, by name (its dry run's lines)."""
        return [("ktor", self.ktor), ("jdk", self.jdk)]


@dataclass(frozen=True)
class IoRun:
    """The io study's JMH run for one release (its jar built at its run, when missing)."""

    run: io.Jmh

    KIND: ClassVar[str] = "JMH"  # its dry run's line
    EACH: ClassVar[str] = "the io study per Ktor release"

    @property
    def release(self) -> str:
        return self.run.release

    def planned_seconds(self) -> float:
        """The most it should take: its JMH run's (io.Jmh.planned_seconds)."""
        return self.run.planned_seconds()


def io_run(args: argparse.Namespace, release: str) -> IoRun:
    """The io study for `release` with this study's --io-* options (forks and timeout: io's defaults)."""
    return IoRun(
        io.Jmh(
            args.io_size,
            warmup_iterations=args.io_iterations,
            iterations=args.io_iterations,
            iteration_ms=args.io_iteration_ms,
            release=release,
        )
    )


@dataclass(frozen=True)
class FigureChange:
    before: float | None
    after: float | None
    clear: bool | None  # the test over the windows says so (None: one window, not known)

    @property
    def change(self) -> float | None:
        a, b = self.before, self.after
        return (b - a) / a if a and b is not None else None


@dataclass
class ChangeRow:
    """One case with one dimension changed (conclusions.Change), its figures before and after."""

    dimension: str  # Ktor or JDK
    case: str
    held: str  # e.g. "JDK 17"
    before: str
    after: str
    figures: dict[str, FigureChange] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {"dimension": self.dimension, "case": self.case, "held": self.held}
        out.update({"from": self.before, "to": self.after})
        for key, f in self.figures.items():
            out.update({f"{key}_from": f.before, f"{key}_to": f.after, f"{key}_change": f.change})
            out[f"{key}_clear"] = f.clear
        return {**out, "flags": self.flags}


@dataclass
class IoRow:
    """The io study's row for one release."""

    ktor: str
    row: io.Row

    def to_json(self) -> dict:
        return {"io": True, "ktor": self.ktor, **asdict(self.row)}


def common_cases(releases: list[versions.Release]) -> list[Case]:
    """Singleton and per-call of every engine all the releases publish."""
    engines = [e for e in releases[0].engines if all(e in r.engines for r in releases)]
    return [Case(lifetime, engine) for lifetime in LIFETIMES for engine in engines]


def matrices(args: argparse.Namespace) -> Matrices:
    names, java_names = versions.names(args.ktor), versions.names(args.java)
    releases = [versions.release(n) for n in names]
    if len(releases) < 2 or len(java_names) < 2:
        raise ValueError("give at least two releases (--ktor) and two JDKs (--java) to compare")
    cases = case_list(args.cases) if args.cases else common_cases(releases)
    load = parse_load(args.load)

    def plan(ktor: list[str], java: list[str]) -> Plan:
        return machinery.runs_plan(
            args, cases, ["static-small"], [load], repeats=args.repeats, dims={"ktor": ktor, "java": java}
        )

    return Matrices(plan(names, java_names), plan(names, java_names[:1]), plan(names[-1:], java_names[1:]))


def plan(args: argparse.Namespace) -> list[Matrices | IoRun]:
    """The two matrices (checked here: releases, JDKs, engines), then io per release."""
    m = matrices(args)
    if not args.io:
        return [m]
    return [m, *(io_run(args, name) for name in m.whole.dims["ktor"])]  # each release's jar: built at its run


def measure(d: Path, item: Matrices | IoRun, args: argparse.Namespace) -> list[ChangeRow | IoRow]:
    if isinstance(item, IoRun):
        out = d / f"jmh-{item.release}"
        return [IoRow(item.release, row) for row in io.jmh(item.run, Path(f"{out}.json"), Path(f"{out}.log"))]
    m = item
    for name, p in (("ktor", m.ktor), ("jdk", m.jdk)):
        print(f"lab study versions: {name} changed: {len(p.runs())} runs", flush=True)
    parts = machinery.run_matrices(m.whole, [(m.ktor, d / "runs-ktor"), (m.jdk, d / "runs-jdk")], d)
    merged = Results(
        plan=m.whole,
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
    return change_rows(merged)


def change_rows(results: Results) -> list[ChangeRow]:
    rows = []
    for group in conclusions.groups(results):
        for c in conclusions.changes(group):
            rows.append(
                ChangeRow(
                    c.dimension,
                    c.case,
                    c.same,
                    c.before_name,
                    c.after_name,
                    {
                        key: FigureChange(
                            c.before.figures[key].mean, c.after.figures[key].mean, c.figure(key)[1]
                        )
                        for key in conclusions.CHANGE_FIGURES
                    },
                    sorted(set(c.before.flags + c.after.flags)),
                )
            )
    return rows


def progress(r: ChangeRow | IoRow) -> str:
    if isinstance(r, IoRow):
        return f"Ktor {r.ktor}: {io.progress(r.row)}"
    return f"{r.case} on {r.held}, {r.dimension} {r.before} -> {r.after}"


def _cell(key: str, digits: int):
    def cell(r: ChangeRow) -> str:
        f = r.figures[key]
        if f.before is None or f.after is None:
            return "-"
        mark = " *" if f.clear else ""
        if f.change is None:
            return f"{f.before} -> {f.after}"
        return f"{f.before:,.{digits}f} -> {f.after:,.{digits}f} ({f.change:+.1%}){mark}"

    return cell


COLUMNS = [
    render.Column("case", lambda r: r.case),
    render.Column("held", lambda r: r.held),
    render.Column("change", lambda r: f"{r.before} -> {r.after}"),
    render.Column("rps", _cell("rps", 0)),
    render.Column("CPU s / 1000 req", _cell("cpu", 3)),
    render.Column("threads max", _cell("threads", 0)),
    render.Column("heap max MiB", _cell("heap", 0)),
    render.Column("flags", lambda r: ", ".join(r.flags) or "-"),
]

IO_COLUMNS = [
    render.Column("Ktor", lambda r: r.ktor),
    render.Column("operation", lambda r: r.row.what),
    render.Column("JVM MB/s", lambda r: r.row.jvm_mb_per_s),
    render.Column("Ktor MB/s", lambda r: r.row.ktor_mb_per_s),
    render.Column("Ktor time / JVM time", lambda r: f"{r.row.ktor_over_jvm_time:.2f}x"),
]


def report(rows: list[ChangeRow | IoRow], args: argparse.Namespace) -> machinery.Report:
    names, java_names = versions.names(args.ktor), versions.names(args.java)
    changes = [r for r in rows if isinstance(r, ChangeRow)]
    io_rows = [r for r in rows if isinstance(r, IoRow)]
    ktor_rows = [r for r in changes if r.dimension == "Ktor"]
    jdk_rows = [r for r in changes if r.dimension == "JDK"]
    charts = []
    for key, title, digits in [
        ("cpu", "Proxy CPU seconds per 1000 requests", 3),
        ("rps", "Requests per second", 0),
    ]:
        for dim, subset in (("ktor", ktor_rows), ("jdk", jdk_rows)):
            if subset:
                first = subset[0]
                charts.append(
                    (
                        f"versions-{dim}-{key}.svg",
                        render.bars(
                            f"{title}, {first.dimension} {first.before} vs {first.after} ({first.held})",
                            [r.case for r in subset],
                            {
                                first.before: [r.figures[key].before for r in subset],
                                first.after: [r.figures[key].after for r in subset],
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
                    [f"{r.row.what} (Ktor {r.ktor})" for r in io_rows],
                    {
                        "JVM": [r.row.jvm_mb_per_s for r in io_rows],
                        "Ktor": [r.row.ktor_mb_per_s for r in io_rows],
                    },
                ),
            )
        )
    jdks = [versions.jdk(n) for n in java_names]
    m = matrices(args)
    settings = {
        "Ktor releases": ", ".join(names),
        "JDKs": ", ".join(f"{j.major} ({j.version}, {j.home})" for j in jdks),
        "cases": ", ".join(c.name for c in m.whole.cases),
        "load": m.whole.loads[0].describe(),
        "per row": f"a proxy warmed once (up to {args.warmup} s), {args.repeats} windows of "
        f"{args.duration} s interleaved across the rows",
        "JVM options": args.java_opts,
        "io": f"JMH, {args.io_size:,} bytes per operation, {args.io_iterations} iterations of "
        f"{args.io_iteration_ms} ms"
        if args.io
        else "not run (--no-io)",
    }
    notes = [
        "Each cell: the centre of the windows before -> after, the change in percent; * marks a change the "
        "test over the windows (t on their logarithms, p < 0.05) supports; it needs 2 windows or more.",
        "A row with flags (not-warm, target, ...) does not compare capacity; at a fixed rate below every "
        "case's capacity, rps is the target, and CPU per request, threads and heap are what compare.",
        "The lab report of every run (verdict, tables, settings): runs/report.md and runs/report.html.",
    ]
    tables = [
        (f"Ktor changed ({', '.join(names)}), JDK {java_names[0]}", machinery.table(COLUMNS, ktor_rows)),
        (f"JDK changed ({', '.join(java_names)}), Ktor {names[-1]}", machinery.table(COLUMNS, jdk_rows)),
    ]
    if io_rows:
        tables.append(("Ktor I/O against JVM I/O, per release (JMH)", machinery.table(IO_COLUMNS, io_rows)))
    return machinery.Report(
        "Ktor release and JDK: what an upgrade changes, per engine", settings, tables, charts, notes
    )


def add_options(p: argparse.ArgumentParser) -> None:
    releases = sorted((r.name for r in versions.releases()), key=versions.version_key)
    options.add_dimension(p, BY_FIELD["ktor"], default=",".join(releases), more="; here, oldest first")
    options.add_dimension(p, BY_FIELD["java"], default="17,25", more="; here, the first is the base")
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
    machinery.add_proxy_runs(p)
    p.add_argument(
        "--windows",
        "--repeats",
        dest="repeats",
        type=int,
        default=confidence.STUDY_WINDOWS,
        help="measured windows per row, interleaved across the rows (default: %(default)s)",
    )
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


def help_text() -> str:
    releases = [r.name for r in versions.releases()]
    return f"Ktor {' vs '.join(releases)} and JDK 17 vs 25: rps, CPU, threads, heap, I/O"


STUDY = machinery.Study(
    name="versions",
    help=help_text(),
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="prometheus",  # the runs are lab run's: nginx, the proxy, Locust and Prometheus
)
