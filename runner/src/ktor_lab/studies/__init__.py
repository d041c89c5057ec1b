"""`lab study NAME`: the public engine studies as presets of the lab (see docs/studies/).

Each study is a short module declaring its STUDY: a `plans.PlanStudy` when it asks what `lab run`
measures (parts that are `lab run`s, its pipeline and its statistics), else a `machinery.Study`
with a small runner of its own (JMH, bursts, transfers, faults: what `lab run` does not measure)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .. import measure, run_report, stack
from ..commands import options
from ..commands import run as lab_run
from ..errors import LabError
from ..paths import REPO
from . import (
    dispatchers,
    distance,
    engines,
    faults,
    io,
    machinery,
    plans,
    protocols,
    replay,
    streaming,
    threads,
    versions,
)

STUDIES: dict[str, machinery.Study | plans.PlanStudy] = {
    m.STUDY.name: m.STUDY
    for m in (threads, replay, streaming, engines, io, faults, versions, protocols, distance, dispatchers)
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="one of the public engine studies, replayed; writes results/study-<name>-<time>/",
        description="Each study writes results.json, report.md and SVG charts; docs/studies/<name>.md "
        "shows a run of it (its command at its top) and what it means.",
    )
    studies = p.add_subparsers(dest="study", required=True)
    for study in STUDIES.values():
        study.add_parser(studies)


def dry_run_lines(items: list[machinery.PlannedItem]) -> list[str]:
    """Per kind of item (a benchmark, a burst, transfers: its KIND and EACH): how many and their most
    time (each its `planned_seconds()`); then the study's in all."""
    kinds: dict[tuple[str, str], list[float]] = {}
    for item in items:
        kinds.setdefault((item.KIND, item.EACH), []).append(item.planned_seconds())
    lines = [
        f"{len(seconds)} {kind} item(s) ({each}): at most about {measure.format_seconds(sum(seconds))}"
        for (kind, each), seconds in kinds.items()
    ]
    total = sum(sum(seconds) for seconds in kinds.values())
    return [*lines, f"the study: at most about {measure.format_seconds(total)} in all"] if kinds else []


def run(args: argparse.Namespace, argv: list[str]) -> int:
    study = STUDIES[args.study]
    command = shlex.join(["lab", "study", *argv[argv.index(args.study) :]])
    if isinstance(study, plans.PlanStudy):
        return run_plans(study, args, command)
    try:
        if args.dry_run:
            items = study.plan(args)
            print(f"lab study {args.study}: dry run; {len(items)} item(s) planned")
            for line in dry_run_lines(items):
                print(f"lab study {args.study}: {line}")
            return 0
        if study.needs != "java":
            stack.require(stack.missing(prometheus_too=False))
        options.handle_signals()
        return show_page(study.name, machinery.run_items(study, args, command, study.plan(args)))
    except ValueError as e:
        raise LabError(f"study {args.study}: {e}") from None


def run_plans(study: plans.PlanStudy, args: argparse.Namespace, command: str) -> int:
    """A study made of `lab run` parts: its dry run (each part's plan and time), or its run."""
    planned = plans.planned_parts(study, args)
    if args.dry_run:
        print(f"lab study {study.name}: dry run; {len(planned)} part(s), each a lab run")
        for line in plans.dry_run(study, planned, args.out or f"results/study-{study.name}-<time>"):
            print(f"lab study {study.name}: {line}")
        return 0
    plans.check_out(args.out)
    stack.require(stack.missing(prometheus_too=True))
    options.handle_signals()
    page, runs = plans.run_parts(study, planned, args, command)
    show_page(study.name, page)
    return lab_run.failed_checks(runs, getattr(args, "fail_on", ()))


def show_page(name: str, page: Path) -> int:
    """A study's page as it ends: where it is, then what it says; 0."""
    print(f"lab study {name}: {page}")
    print()
    print(page.read_text())
    return 0


def report_again(args: argparse.Namespace) -> int:
    """`lab report DIR` of a study's folder: each part's report, then the study's page, from the
    results alone."""
    if args.dry_run:
        print(f"lab report: dry run; would write {args.dir}/report.md and each part's report")
        return 0
    study = STUDIES.get(plans.study_in(args.dir))
    if not isinstance(study, plans.PlanStudy):
        raise LabError(f"{args.dir}: written by a study this lab does not know as lab run parts")
    try:
        for part in plans.results_in(args.dir):
            run_report.write_report(args.dir / part)
        page = plans.write_page(args.dir, study)
    except (FileNotFoundError, ValueError) as e:
        raise LabError(str(e)) from None
    print(f"lab report: {page}")
    return 0


# Where a study's published run is kept (docs/studies/<name>/, as `lab study NAME --out` wrote it)
# and its page (docs/studies/<name>.md), which `lab guide` writes from it.
DOCS = REPO / "docs" / "studies"


def published() -> list[tuple[plans.PlanStudy, Path]]:
    """The studies of `lab run` parts whose run is kept under DOCS, with its folder."""
    return [
        (s, DOCS / s.name)
        for s in STUDIES.values()
        if isinstance(s, plans.PlanStudy) and written_by(s, DOCS / s.name)
    ]


def written_by(study: plans.PlanStudy, d: Path) -> bool:
    """Whether `d` holds a run of `study` (none there, or another study's under its name: not)."""
    try:
        return plans.study_in(d) == study.name
    except (OSError, ValueError, KeyError):
        return False


def page_path(study: plans.PlanStudy) -> Path:
    return DOCS / f"{study.name}.md"


def publish(args: argparse.Namespace) -> int:
    """`lab guide`'s second half: docs/studies/<name>.md of every study whose run is kept under
    docs/studies/<name>/, from its results alone (and each part's report.md again). With --check,
    writes nothing: 1 when a page is not what it would write."""
    kept = published()
    if args.dry_run:
        names = ", ".join(s.name for s, _ in kept) or "none"
        print(f"lab guide: dry run; would write the pages of the studies kept under docs/studies/: {names}")
        return 0
    stale = []
    for study, d in kept:
        try:
            text = plans.page_of(d, study, base=f"{study.name}/")
        except (FileNotFoundError, ValueError, KeyError) as e:
            raise LabError(f"{d}: cannot read its results ({e!r})") from None
        path = page_path(study)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(REPO)))
            continue
        for part in plans.results_in(d):
            (d / part / "report.md").write_text(run_report.markdown(run_report.load(d / part)))
        path.write_text(text)
        print(f"lab guide: {path.relative_to(REPO)}, from {d.relative_to(REPO)}/")
    if stale:
        verb = "differs" if len(stale) == 1 else "differ"
        print(f"lab guide: {', '.join(stale)} {verb} from what lab guide writes: run lab guide", flush=True)
        return 1
    if args.check and kept:
        pages = ", ".join(str(page_path(s).relative_to(REPO)) for s, _ in kept)
        print(f"lab guide: {pages}: what lab guide writes")
    return 0
