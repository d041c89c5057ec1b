"""`lab study NAME`: the public engine studies as presets of the lab (see docs/studies/).

Each study is a short module declaring a `machinery.Study`; the machinery runs it."""

from __future__ import annotations

import argparse
import shlex

from .. import stack
from ..errors import LabError
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


def run(args: argparse.Namespace, argv: list[str]) -> int:
    study = STUDIES[args.study]
    command = shlex.join(["lab", "study", *argv[argv.index(args.study) :]])
    if args.dry_run:
        try:
            items = study.plan(args)
        except ValueError as e:
            raise LabError(f"study {args.study}: {e}") from None
        print(f"lab study {args.study}: dry run; {len(items)} item(s) planned")
        return 0
    if study.needs != "java":
        stack.require(stack.missing(prometheus_too=study.needs == "prometheus"))
    try:
        report = machinery.run(study, args, command)
    except ValueError as e:
        raise LabError(f"study {args.study}: {e}") from None
    print(f"lab study {args.study}: {report}")
    print()
    print(report.read_text())
    return 0
