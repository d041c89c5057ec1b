"""`lab guide`: docs/guide.md, which engine and lifetime for each workload, from the results of
`lab run` under docs/guide/ (guide.py); cli.py then has studies/ write the pages of the studies
whose runs are kept under docs/studies/."""

from __future__ import annotations

import argparse

from .. import guide
from ..errors import LabError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "guide",
        help="docs/guide.md and the study pages, from the runs kept under docs/guide/ and docs/studies/",
        description="Writes docs/guide.md from the results of `lab run` kept under docs/guide/<workload>/ "
        "(and its cpu.svg, the chart of CPU per request, and the report.md and report.html of every "
        "lab run kept under docs/, again, so that they agree); a workload without results gets the "
        "command that measures it. Then docs/studies/NAME.md of each study whose run is kept under "
        "docs/studies/NAME/ (`lab study NAME --out docs/studies/NAME`), from its results alone.",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing: exit 1 when docs/guide.md, a workload's chart, a kept run's report.md or "
        "report.html, or a study page is not what `lab guide` would write",
    )


def run(args: argparse.Namespace) -> int:
    measured = [w for w in guide.WORKLOADS if (w.folder / "results.json").exists()]
    if args.dry_run:
        print(
            f"lab guide: dry run; would write {guide.GUIDE.relative_to(guide.REPO)} from "
            f"{len(measured)} of {len(guide.WORKLOADS)} workloads' results"
            + (f" ({', '.join(w.slug for w in measured)})" if measured else "")
        )
        return 0
    try:
        files = {guide.GUIDE: guide.page(), **guide.charts(), **guide.kept_reports()}
    except (FileNotFoundError, ValueError) as e:
        raise LabError(str(e)) from None
    reports = sum(p.name == "report.html" for p in files)
    if args.check:
        differ = [p for p, t in files.items() if not p.exists() or p.read_text() != t]
        if not differ:
            print(
                f"lab guide: docs/guide.md, its charts and {reports} kept runs' reports are what lab "
                "guide writes"
            )
            return 0
        names = ", ".join(
            str(p.relative_to(guide.REPO) if p.is_relative_to(guide.REPO) else p) for p in differ
        )
        print(f"lab guide: {names} differ from what lab guide writes: run lab guide", flush=True)
        return 1
    for path, content in files.items():
        path.write_text(content)
    print(
        f"lab guide: {guide.GUIDE.relative_to(guide.REPO)}, {len(measured)} of {len(guide.WORKLOADS)} "
        f"workloads measured; the reports of {reports} kept runs"
    )
    return 0
