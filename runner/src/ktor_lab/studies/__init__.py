"""`lab study NAME`: the public engine studies as presets of the lab (see docs/studies/).

Each study is a short module declaring a `machinery.Study`; the machinery runs it."""

from __future__ import annotations

import argparse
import shlex

from .. import measure, stack
from ..commands import options
from ..errors import LabError
from ..plan import Plan
from . import (
    dispatchers,
    distance,
    engines,
    faults,
    io,
    machinery,
    protocols,
    replay,
    streaming,
    threads,
    versions,
)

STUDIES: dict[str, machinery.Study] = {
    m.STUDY.name: m.STUDY
    for m in (threads, replay, streaming, engines, io, faults, versions, protocols, distance, dispatchers)
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="one of the public engine studies, replayed; writes results/study-<name>-<time>/",
        description="Each study writes results.json, report.md and SVG charts; docs/studies/<name>.md "
        "shows a full-size run and what it means.",
    )
    studies = p.add_subparsers(dest="study", required=True)
    for study in STUDIES.values():
        study.add_parser(studies)


def plans_in(item) -> list[tuple[str, Plan]]:
    """The `lab run` plans an item of a study is (a Plan) or says it makes (`named_plans()`, as each
    study's Matrices does), by name; none for any other item (a benchmark, a transfer)."""
    if isinstance(item, Plan):
        return [("", item)]
    named = getattr(item, "named_plans", None)
    return named() if callable(named) else []


def dry_run_lines(items: list) -> list[str]:
    """Per `lab run` plan of the study: its proxies, windows and most time; per kind of other item
    (a benchmark, a burst, transfers: its `planned_seconds()`, with its KIND and EACH): how many
    and their most time; then the study's in all."""
    lines, matrices, others, untimed = [], 0.0, {}, 0
    for item in items:
        if callable(said := getattr(item, "dry_run_line", None)):
            lines.append(said())
            continue
        plans = plans_in(item)
        if not plans:
            if callable(timed := getattr(item, "planned_seconds", None)):
                kind = getattr(item, "KIND", type(item).__name__), getattr(item, "EACH", "")
                others.setdefault(kind, []).append(timed())
            else:
                untimed += 1
            continue
        for name, plan in plans:
            seconds = measure.planned_seconds(plan)
            matrices += seconds
            skipped = len(plan.skipped())
            lines.append(
                f"{name or 'matrix'}: {len(plan.proxies())} proxies, {len(plan.runs())} windows of "
                f"{plan.duration_s} s, warm-up <= {plan.warmup_s} s"
                + (f" (first at {plan.warm_first.label}, then at its load)" if plan.warm_first else "")
                + (f", {skipped} combinations skipped" if skipped else "")
                + f"; at most about {measure.format_seconds(seconds)}"
            )
    if matrices:
        lines.append(
            f"the lab run matrices: at most about {measure.format_seconds(matrices)}"
            + ("" if others else " in all")
        )
    for (kind, each), seconds in others.items():
        said = f"{len(seconds)} {kind} item(s)" + (f" ({each})" if each else "")
        lines.append(f"{said}: at most about {measure.format_seconds(sum(seconds))}")
    if others:
        total = matrices + sum(sum(s) for s in others.values())
        lines.append(
            f"the study: at most about {measure.format_seconds(total)} in all"
            + (", the lab run matrices included" if matrices else "")
        )
    if untimed:
        lines.append(f"{untimed} other item(s): their time is not estimated")
    return lines


def run(args: argparse.Namespace, argv: list[str]) -> int:
    study = STUDIES[args.study]
    command = shlex.join(["lab", "study", *argv[argv.index(args.study) :]])
    if args.dry_run:
        try:
            items = study.plan(args)
        except ValueError as e:
            raise LabError(f"study {args.study}: {e}") from None
        print(f"lab study {args.study}: dry run; {len(items)} item(s) planned")
        for line in dry_run_lines(items):
            print(f"lab study {args.study}: {line}")
        return 0
    if study.needs != "java":
        stack.require(stack.missing(prometheus_too=study.needs == "prometheus"))
    options.handle_signals()
    try:
        items = study.plan(args)
        report = machinery.run(study, args, command, items)
    except ValueError as e:
        raise LabError(f"study {args.study}: {e}") from None
    print(f"lab study {args.study}: {report}")
    print()
    print(report.read_text())
    return 0
