"""`lab report DIR`: report.md and report.html again from the results.json `lab run` wrote."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import run_report
from ..errors import LabError


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="report.md and report.html from a folder `lab run` wrote")
    p.add_argument("dir", type=Path, help="the folder holding results.json")


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        if not (args.dir / "results.json").exists():
            raise LabError(f"{args.dir / 'results.json'} does not exist: give the folder `lab run` wrote")
        print(f"lab report: dry run; would write {args.dir}/report.md and report.html")
        return 0
    try:
        md, page = run_report.write_report(args.dir)
    except (FileNotFoundError, ValueError) as e:
        raise LabError(str(e)) from None
    print(f"lab report: {md} and {page}")
    return 0
