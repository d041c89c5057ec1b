"""`lab study NAME`: the public engine studies as presets of the lab (see docs/studies/)."""

from __future__ import annotations

import argparse
import shlex
import sys

from .. import stack
from . import engines, faults, io, replay, streaming, threads

STUDIES = {m.NAME: m for m in (threads, replay, streaming, engines, io, faults)}


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


def cmd_study(args: argparse.Namespace, argv: list[str]) -> int:
    module = STUDIES[args.study]
    args.argv_text = shlex.join(argv[argv.index(args.study) + 1 :])
    needs = getattr(module, "NEEDS", "upstream")  # upstream: nginx, java, the proxy jar
    if needs != "java" and stack.cannot_start(stack.preflight(need_prometheus=needs == "prometheus")):
        return 2
    try:
        report = module.run(args)
    except KeyboardInterrupt:
        print(f"lab study {args.study}: interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError, OSError, ValueError) as e:
        print(f"lab study {args.study}: {e}", file=sys.stderr)
        return 1
    print(f"lab study {args.study}: {report}")
    print()
    print(report.read_text())
    return 0
