"""`lab study replay`: the earlier compose lab's setup, next to measurements that rank engines.

The compose lab ran 1000 Locust users with a 1-2 s wait against singleton and per-call
CIO and Apache, and read the rps as the engines' speed. This runs that load (flagged
`load-model` by the verdict rules) beside the same four cases at fixed rates (equal work,
so latency, CPU and threads compare) and a sweep of rising rates plus a closed loop without
wait (what each case can do). It is a `lab run` matrix with these loads; the matrix's own
report is in matrix/, the comparison in report.md.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .. import render, verdict
from ..cases import case_list
from ..plan import Plan, parse_load
from ..results import Results, Run
from ..results import load as load_results
from . import machinery

CASES = ("singleton-cio", "singleton-apache", "per-call-cio", "per-call-apache")
# What the compose lab published (../shared/DESIGN.md): rps and median ms.
PUBLISHED = {
    "singleton-cio": (600, 100),
    "singleton-apache": (500, 400),
    "per-call-cio": (280, 2000),
    "per-call-apache": (150, 5000),
}
# A sweep step counts as held when the rate reached its target, under 1% errors and p99 below this.
HELD_P99_MS = 1000.0
TIE = 0.05  # values within 5% of the one ranked above share its rank


@dataclass
class Rate:
    """One case at one fixed rate."""

    target: float
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    cpu_per_1000: float | None
    threads_max: float | None
    held: bool


@dataclass
class Row:
    """One case: the published figures, the replayed load, the fixed rates, its capacity."""

    case: str
    published_rps: float | None
    published_p50_ms: float | None
    replay_rps: float | None
    replay_p50_ms: float | None
    replay_flags: list[str] | None
    replay_reasons: list[str] | None
    rates: list[Rate]
    highest_rate_held: float | None
    capacity_rps: float | None
    capacity_p99_ms: float | None
    capacity_flags: list[str] | None
    # Filled by the report, across the rows (1 = first; within TIE of the one above: its rank).
    rank_by_replay_rps: int | None = None
    rank_by_capacity_rps: int | None = None
    rank_by_highest_rate_held: int | None = None


def matrix_plan(args: argparse.Namespace) -> Plan:
    loads = [args.replay_load, *[f"rate/{r}" for r in args.rates.split(",")], args.capacity_load]
    return machinery.runs_plan(args, case_list(args.cases), ["static-small"], [parse_load(x) for x in loads])


@dataclass(frozen=True)
class ReadMatrix:
    """--from-matrix: the matrix an earlier replay wrote, read instead of measured."""

    folder: Path
    plan: Plan

    def dry_run_line(self) -> str:
        return f"reads the matrix in {self.folder}: measures nothing"


def plan(args: argparse.Namespace) -> list[Plan | ReadMatrix]:
    """One run: the whole matrix (or, with --from-matrix, the folder that holds it)."""
    if args.from_matrix is None:
        return [matrix_plan(args)]
    if not (args.from_matrix / "results.json").is_file():
        raise ValueError(
            f"--from-matrix {args.from_matrix}: no results.json there (give the matrix/ folder of a replay)"
        )
    return [ReadMatrix(args.from_matrix, matrix_plan(args))]


def held(run: Run) -> bool:
    flags = run.verdict.flags
    return "target" in flags and "errors" not in flags and (run.locust.p99_ms or 0) <= HELD_P99_MS


def measure(d: Path, item: Plan | ReadMatrix, args: argparse.Namespace) -> list[Row]:
    if isinstance(item, ReadMatrix):
        results, p = load_results(item.folder), item.plan
        if [c.name for c in results.plan.cases] != [c.name for c in p.cases] or [
            x.label for x in results.plan.loads
        ] != [x.label for x in p.loads]:
            raise ValueError(f"{item.folder} ran other cases or loads than these options give")
    else:
        p = item
        (results,) = machinery.run_matrices(p, [(p, d / "matrix")], d / "matrix")
    for r in results.runs:
        r.verdict = verdict.judge(r)
    return summarize(results, *(parse_load(x).label for x in (args.replay_load, args.capacity_load)))


def summarize(results: Results, replay_label: str, capacity_label: str) -> list[Row]:
    rows = []
    for case in results.plan.cases:
        runs = {r.load.label: r for r in results.runs if r.case == case.id}
        replay, capacity = runs.get(replay_label), runs.get(capacity_label)
        rates = sorted((r for r in runs.values() if r.load.model == "rate"), key=lambda r: r.load.target_rps)
        held_rates = [r.load.target_rps for r in rates if held(r)]
        published = PUBLISHED.get(case.id, (None, None))
        rows.append(
            Row(
                case=case.id,
                published_rps=published[0],
                published_p50_ms=published[1],
                replay_rps=replay and replay.locust.rps,
                replay_p50_ms=replay and replay.locust.p50_ms,
                replay_flags=replay and replay.verdict.flags,
                replay_reasons=replay and replay.verdict.reasons,
                rates=[
                    Rate(
                        target=r.load.target_rps,
                        rps=r.locust.rps,
                        p50_ms=r.locust.p50_ms,
                        p99_ms=r.locust.p99_ms,
                        cpu_per_1000=r.proxy.cpu_seconds_per_1000_requests,
                        threads_max=r.prometheus.threads_live_max,
                        held=held(r),
                    )
                    for r in rates
                ],
                highest_rate_held=max(held_rates) if held_rates else None,
                capacity_rps=capacity and capacity.locust.rps,
                capacity_p99_ms=capacity and capacity.locust.p99_ms,
                capacity_flags=capacity and capacity.verdict.flags,
            )
        )
    return rows


def rank(values: dict[str, float | None]) -> dict[str, int]:
    """Rank of each name by its value, highest first (1); a value within TIE of the one ranked
    above it shares that rank; names without a value have none."""
    ordered = sorted((name for name, v in values.items() if v is not None), key=lambda n: -values[n])
    ranks: dict[str, int] = {}
    for i, name in enumerate(ordered):
        above = ordered[i - 1] if i else None
        tie = above is not None and values[name] >= (1 - TIE) * values[above]
        ranks[name] = ranks[above] if tie else i + 1
    return ranks


def progress(r: Row) -> str:
    flags = ", ".join(r.replay_flags or []) or "capacity"
    return (
        f"{r.case}: replayed {r.replay_rps or 0:,.0f} rps ({flags}), capacity {r.capacity_rps or 0:,.0f} rps"
    )


def report(rows: list[Row], args: argparse.Namespace) -> machinery.Report:
    replay_label, capacity_label = (parse_load(x).label for x in (args.replay_load, args.capacity_load))
    for key in ("replay_rps", "capacity_rps", "highest_rate_held"):
        ranks = rank({r.case: getattr(r, key) for r in rows})
        for r in rows:
            setattr(r, f"rank_by_{key}", ranks.get(r.case))
    replay_cols = [
        render.Column("case", lambda r: r.case),
        render.Column("published rps", lambda r: r.published_rps),
        render.Column("published p50 ms", lambda r: r.published_p50_ms),
        render.Column("replayed rps", lambda r: r.replay_rps),
        render.Column("replayed p50 ms", lambda r: r.replay_p50_ms, 1),
        render.Column("what set the rate", lambda r: ", ".join(r.replay_flags or []) or "capacity"),
    ]
    rate_cols = [
        render.Column("case", lambda x: x[0]),
        render.Column("rps", lambda x: x[1].rps),
        render.Column("p50 ms", lambda x: x[1].p50_ms, 1),
        render.Column("p99 ms", lambda x: x[1].p99_ms, 1),
        render.Column("CPU s / 1000 req", lambda x: x[1].cpu_per_1000, 3),
        render.Column("threads max", lambda x: x[1].threads_max),
        render.Column("held", lambda x: x[1].held),
    ]
    targets = sorted({x.target for r in rows for x in r.rates})

    def at(r: Row, target: float) -> Rate:
        return next(x for x in r.rates if x.target == target)

    rate_tables = [
        (f"Fixed rate {t:g} rps", machinery.table(rate_cols, [(r.case, at(r, t)) for r in rows]))
        for t in targets
    ]
    ranking_cols = [
        render.Column("case", lambda r: r.case),
        render.Column("highest rate held", lambda r: r.highest_rate_held),
        render.Column(f"capacity rps ({capacity_label})", lambda r: r.capacity_rps),
        render.Column("capacity p99 ms", lambda r: r.capacity_p99_ms, 1),
        render.Column("capacity flags", lambda r: ", ".join(r.capacity_flags or []) or "none"),
        render.Column("rank by capacity", lambda r: r.rank_by_capacity_rps),
        render.Column("rank by replayed rps", lambda r: r.rank_by_replay_rps),
    ]
    cases = [r.case for r in rows]
    charts = [
        (
            "replay-rps.svg",
            render.bars(
                "rps: published, replayed (load-model bound), and capacity",
                cases,
                {
                    "published": [r.published_rps for r in rows],
                    f"replayed {replay_label}": [r.replay_rps for r in rows],
                    f"capacity {capacity_label}": [r.capacity_rps for r in rows],
                },
            ),
        ),
        (
            "replay-rate-p99.svg",
            render.bars(
                "p99 ms at each fixed rate (same work for every case)",
                cases,
                {f"{t:g} rps": [at(r, t).p99_ms for r in rows] for t in targets},
                digits=1,
            ),
        ),
    ]
    settings = {
        "cases": ", ".join(cases),
        "scenario": "static-small",
        "replayed load": replay_label,
        "fixed rates / sweep": args.rates,
        "capacity load": capacity_label,
        "held": f"target reached, < 1% errors, p99 <= {HELD_P99_MS:g} ms",
        "warm-up s (most)": args.warmup,
        "window s": args.duration,
        "proxy JVM options": args.java_opts,
        "matrix report": str(args.from_matrix / "report.md") if args.from_matrix else "matrix/report.md",
    }
    notes = [f"{r.case} replayed: {why}" for r in rows for why in (r.replay_reasons or [])]
    return machinery.Report(
        "The earlier compose lab replayed, beside fixed rates and capacity",
        settings,
        [
            (f"The published setup replayed ({replay_label})", machinery.table(replay_cols, rows)),
            *rate_tables,
            ("What each case can do", machinery.table(ranking_cols, rows)),
        ],
        charts,
        notes,
    )


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated (default: %(default)s)")
    p.add_argument(
        "--replay-load", default="closed/1000/1-2", help="the published load (default: %(default)s)"
    )
    p.add_argument(
        "--rates",
        default="250,500,1000,2000",
        help="fixed rates, also the sweep's steps (default: %(default)s)",
    )
    p.add_argument(
        "--capacity-load", default="closed/50/0", help="a closed loop without wait (default: %(default)s)"
    )
    machinery.add_proxy_runs(p, duration=30)
    p.add_argument(
        "--from-matrix",
        type=Path,
        default=None,
        metavar="DIR",
        help="no runs: the study's tables from DIR/results.json, the matrix an earlier replay wrote",
    )


STUDY = machinery.Study(
    name="replay",
    help="1000 users with a 1-2 s wait (the compose lab) beside fixed rates and capacity",
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="prometheus",  # the matrix reads threads and heap from Prometheus
)
