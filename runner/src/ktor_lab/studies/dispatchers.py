"""`lab study dispatchers`: threads, revisited. Does a virtual thread per task (Loom), or a larger IO
pool, remove the thread cost of the engines that block one per request, at what CPU and latency?

Two matrices of `lab run`, each proxy warmed once and measured in interleaved windows:
- `slow`, the threads study's question: IN_FLIGHT requests in flight at once, each answered by
  nginx after 2 s (the `slow` scenario, IN_FLIGHT users that never wait);
- `distance`, the distance study's far rows: a fixed rate to an upstream 80 ms away (Toxiproxy).
Each over the client's dispatcher (`io`: Dispatchers.IO, 64 threads; `virtual`; `io:256`) and the
JDK (17: platform threads only; 25). A dispatcher an engine cannot take (Apache's, Apache5's I/O
reactors; virtual threads on JDK 17) is skipped by name. The figures: threads (live, active
unparked, carriers), pinned virtual threads, CPU per request, p50/p99, heap; each the mean of the
windows with its 95% interval, and a change named only when the test says so.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import conclusions, confidence, render, versions
from ..cases import BY_FIELD, DISPATCHER_TITLES, Case, engine_list
from ..commands import options
from ..confidence import Estimate
from ..plan import Plan, parse_load
from ..results import Results
from . import machinery

IN_FLIGHT = 100
# The figures of a row, by the key conclusions.FIGURES gives them.
KEYS = ("rps", "p50", "p99", "cpu", "threads", "unparked", "carriers", "pinned", "heap")


@dataclass(frozen=True)
class Matrices:
    whole: Plan
    parts: tuple[tuple[str, Plan], ...]  # ("slow", plan), ("distance", plan)

    def named_plans(self) -> list[tuple[str, Plan]]:
        """The lab runs it makes, by name (its dry run's lines)."""
        return list(self.parts)


@dataclass
class Row:
    """One case on one JDK and dispatcher in one part: its figures over its windows."""

    part: str
    case: str  # e.g. per-call-cio
    java: str  # the JDK's major version
    dispatcher: str
    windows: int
    means: dict[str, float | None] = field(default_factory=dict)
    half_widths: dict[str, float | None] = field(default_factory=dict)
    estimates: dict[str, Estimate] = field(default_factory=dict, repr=False)
    flags: list[str] = field(default_factory=list)

    @property
    def engine(self) -> str:
        return Case.parse(self.case).engine

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("estimates")
        d["windows_values"] = {k: list(e.values) for k, e in self.estimates.items()}
        return d


def matrices(args: argparse.Namespace) -> Matrices:
    engines = engine_list(args.engines)
    lifetimes = [x.strip() for x in args.lifetimes.split(",") if x.strip()]
    dispatchers = versions.names(args.dispatcher)
    older, newer = versions.names(args.java_platform), versions.names(args.java)
    # Each case on the platform JDKs with Ktor's default dispatcher, and on the newer ones with each
    # dispatcher; what a case cannot take is skipped, by name. A case's variants stand together: a
    # plan too large to be up at once is measured in batches (measure.batches), and the rows a note
    # compares (one case, io against virtual) must share a batch to be interleaved.
    variants = [
        variant
        for lifetime in lifetimes
        for engine in engines
        for variant in (
            *(Case(lifetime, engine, java=j) for j in older),
            *(Case(lifetime, engine, java=j, dispatcher=d) for j in newer for d in dispatchers),
        )
    ]
    cases = [c for c in variants if not c.refusal()]
    for case in (c for c in variants if c.refusal()):
        print(f"lab study dispatchers: skips {case.name}: {case.refusal().split('; ')[0]}", flush=True)
    if not cases:
        raise ValueError("no case can take these dispatchers and JDKs")
    rate = parse_load(args.rate_load)
    if rate.model != "rate":
        raise ValueError(f"--rate-load {args.rate_load!r}: give a fixed rate (rate/RPS/USERS)")

    def plan(scenario: str, load, **dims) -> Plan:
        return machinery.runs_plan(args, cases, [scenario], [load], repeats=args.windows, **dims)

    parts = []
    if "slow" in args.parts:
        parts.append(("slow", plan("slow", parse_load(f"closed/{args.in_flight}/0"))))
    if "distance" in args.parts:
        parts.append(("distance", plan("static-small", rate, dims={"rtt_ms": options.rtt_list(args.rtt)})))
    if not parts:
        raise ValueError("--parts: give slow, distance or both")
    whole = parts[-1][1]
    return Matrices(whole, tuple(parts))


def plan(args: argparse.Namespace) -> list[Matrices]:
    return [matrices(args)]


def measure(d: Path, m: Matrices, args: argparse.Namespace) -> list[Row]:
    runs = [(p, d / f"runs-{name}") for name, p in m.parts]
    results = machinery.run_matrices(m.whole, runs, d)
    return [row for (name, _), r in zip(m.parts, results, strict=True) for row in rows_of(name, r)]


def rows_of(part: str, results: Results) -> list[Row]:
    out = []
    for group in conclusions.groups(results):
        for r in group.rows:
            case = r.case
            run = r.runs[0]
            estimates = {k: r.figures[k] for k in KEYS}
            out.append(
                Row(
                    part,
                    case.id,
                    run.java_major,
                    run.dim("dispatcher"),
                    r.windows,
                    {k: e.mean for k, e in estimates.items()},
                    {k: e.half_width for k, e in estimates.items()},
                    estimates,
                    r.flags,
                )
            )
    return out


def progress(r: Row) -> str:
    return f"{r.part}: {r.case} jdk {r.java} dispatcher {r.dispatcher}: {r.windows} windows"


# --- the report ---------------------------------------------------------------------------------


def cell(key: str, digits: int):
    def text(r: Row) -> str:
        mean, half = r.means.get(key), r.half_widths.get(key)
        if mean is None:
            return "-"
        return f"{mean:,.{digits}f}" + (f" ±{half:.0%}" if half is not None else "")

    return text


COLUMNS = [
    render.Column("case", lambda r: r.case),
    render.Column("JDK", lambda r: r.java),
    render.Column("dispatcher", lambda r: r.dispatcher),
    render.Column("rps", cell("rps", 0)),
    render.Column("p50 ms", cell("p50", 0)),
    render.Column("p99 ms", cell("p99", 0)),
    render.Column("CPU s / 1000 req", cell("cpu", 3)),
    render.Column("threads max", cell("threads", 0)),
    render.Column("active unparked max", cell("unparked", 0)),
    render.Column("carriers max", cell("carriers", 0)),
    render.Column("pinned / window", cell("pinned", 0)),
    render.Column("heap max MiB", cell("heap", 0)),
    render.Column("flags", lambda r: ", ".join(r.flags) or "-"),
]


def compare(a: Row, b: Row, key: str) -> str:
    """B against A on one figure, with its test (confidence.compare: the floor is the lab's minimum:
    a study has no A/A pair of its own)."""
    from ..confidence import compare as test

    c = test(a.estimates[key], b.estimates[key])
    if c.difference is None:
        return f"{conclusions.BY_KEY[key].heading}: not measured"
    f = conclusions.BY_KEY[key]
    return f"{f.heading} {c.a.mean:,.{f.digits}f} -> {c.b.mean:,.{f.digits}f} ({c.words()})"


def verdicts(rows: list[Row]) -> list[str]:
    """Per part, engine and lifetime on the newest JDK: virtual threads and a larger pool against io."""
    out = []
    newest = max((r.java for r in rows), key=lambda j: int(j) if j.isdigit() else 0, default="")
    for part in dict.fromkeys(r.part for r in rows):
        mine = {(r.case, r.dispatcher): r for r in rows if r.part == part and r.java == newest}
        for case in dict.fromkeys(c for c, _ in mine):
            base = mine.get((case, "io"))
            if base is None:
                continue
            for dispatcher in ("virtual", *sorted(d for c, d in mine if c == case and d.startswith("io:"))):
                if (other := mine.get((case, dispatcher))) is None:
                    continue
                parts = [compare(base, other, k) for k in ("threads", "cpu", "p99", "rps")]
                pinned = other.means.get("pinned")
                text = f"{part}, {case} on JDK {newest}, io -> {dispatcher}: " + "; ".join(parts)
                if dispatcher == "virtual" and pinned is not None:
                    text += f"; {pinned:,.0f} pinned virtual threads a window"
                out.append(text + ".")
    return out


def report(rows: list[Row], args: argparse.Namespace) -> machinery.Report:
    tables = [
        (
            f"{part}: " + (f"{args.in_flight} requests in flight, each 2 s at nginx" if part == "slow" else
                           f"{args.rate_load} to nginx {args.rtt} ms away"),
            machinery.table(COLUMNS, [r for r in rows if r.part == part]),
        )
        for part in dict.fromkeys(r.part for r in rows)
    ]  # fmt: skip
    settings = {
        "engines": args.engines,
        "lifetimes": args.lifetimes,
        "dispatchers": "; ".join(f"{d} ({DISPATCHER_TITLES.get(d, DISPATCHER_TITLES['io:N'])})" for d in
                                 versions.names(args.dispatcher)),
        "JDKs": f"{args.java} (every dispatcher), {args.java_platform} (io only)",
        "per row": f"a proxy warmed once (up to {args.warmup} s), {args.windows} windows of "
        f"{args.duration} s interleaved across the rows",
        "JVM options": args.java_opts,
    }  # fmt: skip
    notes = [
        *verdicts(rows),
        "Each figure: the mean of the row's windows ± half its 95% interval. A change is named only when "
        "Mann-Whitney U over the windows gives p < 0.05 and it exceeds 1%.",
        "A dispatcher an engine cannot take is skipped (Apache's and Apache5's I/O reactors run their own "
        "threads; virtual threads need JDK 21). The lab reports of the runs: runs-slow/ and runs-distance/.",
    ]
    return machinery.Report(
        "Threads, revisited: virtual threads and a larger IO pool per engine", settings, tables, [], notes
    )


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p, default="cio,okhttp,java")
    machinery.add_lifetimes(p)
    options.add_dimension(p, BY_FIELD["dispatcher"], default="io,virtual,io:256")
    options.add_dimension(
        p,
        BY_FIELD["java"],
        default="25",
        more="; here, each dispatcher runs on each (21+ for virtual)",
    )
    p.add_argument(
        "--java-platform",
        default="17",
        help="JDKs that run Ktor's default dispatcher only, for reference (default: %(default)s)",
    )
    p.add_argument("--parts", default="slow,distance", help="slow, distance or both (default: %(default)s)")
    p.add_argument(
        "--in-flight", type=int, default=IN_FLIGHT, help="slow: requests in flight (default: %(default)s)"
    )
    options.add_dimension(p, BY_FIELD["rtt_ms"], default="80", more="; here, the distance part's")
    p.add_argument(
        "--rate-load", default="rate/100/200", help="distance: the fixed rate (default: %(default)s)"
    )
    p.add_argument(
        "--windows",
        type=int,
        default=confidence.STUDY_WINDOWS,
        help="measured windows per row (default: %(default)s)",
    )
    machinery.add_proxy_runs(p)


STUDY = machinery.Study(
    name="dispatchers",
    help="threads, revisited: platform threads, virtual threads and a larger IO pool per engine",
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="prometheus",
)
