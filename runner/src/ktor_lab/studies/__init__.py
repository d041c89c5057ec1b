"""`lab study NAME`: the public engine studies as presets of the lab (see docs/studies/)."""

from __future__ import annotations

import argparse
import shlex

from .. import stack
from ..errors import LabError
from . import engines, faults, io, replay, streaming, threads, versions

STUDIES = {m.NAME: m for m in (threads, replay, streaming, engines, io, faults, versions)}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="one of the public engine studies, replayed; writes results/study-<name>-<time>/",
        description="Each study writes results.json, report.md and SVG charts; docs/studies/<name>.md "
        "shows a full-size run and what it means.",
    )
    studies = p.add_subparsers(dest="study", required=True)
    for module in STUDIES.values():
        module.add_parser(studies)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    module = STUDIES[args.study]
    args.argv_text = shlex.join(argv[argv.index(args.study) + 1 :])
    needs = getattr(module, "NEEDS", "upstream")  # upstream: nginx, java, the proxy jar
    if needs != "java":
        stack.require(stack.missing(prometheus_too=needs == "prometheus"))
    try:
        report = module.run(args)
    except ValueError as e:
        raise LabError(f"study {args.study}: {e}") from None
    print(f"lab study {args.study}: {report}")
    print()
    print(report.read_text())
    return 0
