"""`lab compare OLD NEW`: two folders `lab run` wrote for one plan, row by row and figure by
figure, each change with its interval and test (comparison.py; benchstat for the lab)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import comparison
from ..errors import LabError
from ..results import load


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="two runs of one plan (before and after a change): each row's figures, NEW/OLD with 95%% "
        "intervals, ~ where no change is shown",
        description="Per row and figure: the ratio NEW/OLD of the row's geometric means, its 95% "
        "interval and a t test on the logs of its JVMs (its windows with one JVM a row), their spread "
        "pooled over the rows of both runs; ~ where p >= 0.05. Refuses two runs of different plans or "
        "machines unless --force.",
        epilog="example: lab run --out results/before; (upgrade Ktor, change a setting); "
        "lab run --out results/after; lab compare results/before results/after",
    )
    p.add_argument("old", type=Path, help="the folder of the run before (its results.json)")
    p.add_argument("new", type=Path, help="the folder of the run after")
    p.add_argument(
        "--force",
        action="store_true",
        help="compare runs of different plans or machines anyway (rows both measured)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        old, new = load(args.old), load(args.new)
    except (FileNotFoundError, ValueError) as e:
        raise LabError(str(e)) from None
    if (why := comparison.mismatch(old, new)) and not args.force:
        raise LabError(f"compare: {args.old} and {args.new}: {why}; give --force to compare them anyway")
    found = comparison.changes(old, new)
    if not found:
        raise LabError(f"compare: {args.old} and {args.new} measured no row in common")
    if args.dry_run:
        print(f"lab compare: dry run; {len(found)} lines of {len({c.row for c in found})} rows")
        return 0
    if why:
        print(f"lab compare: {why}; compared anyway (--force)")
    print("\n".join(comparison.lines(str(args.old), str(args.new), found, comparison.what_changed(old, new))))
    return 0
