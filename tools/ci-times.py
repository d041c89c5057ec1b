#!/usr/bin/env python3
"""What a `.ci/run` log says of the suite's time, as JSON: docs/testing.md's figures come from it.

    python3 tools/ci-times.py ci.log [--commit SHA] > docs/test-runs/ci.json

Reads the commit and the whole run's seconds (`.ci/run` prints both; `--commit` for a log from
before it did), the unit tier's and the suite's pytest summaries, and the suite's time per file.
Exits 1 with one line when the log holds no suite summary (a run that did not finish) or a
summary with a failed test.
"""

from __future__ import annotations

import json
import re
import sys

SUMMARY = re.compile(r"^=+ (?P<counts>[\w ,]+?) in (?P<seconds>[\d.]+)s(?: \([\d:]+\))? =+$")
FILE_TIME = re.compile(r"^\s+(?P<minutes>[\d.]+) min\s+(?:runner/)?tests/(?P<file>\w+)\.py$")


def counts(text: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", text)}


def read(lines: list[str]) -> dict:
    summaries = [(counts(m["counts"]), float(m["seconds"])) for m in map(SUMMARY.match, lines) if m]
    if len(summaries) < 2:
        raise ValueError("the log holds no suite summary: give the output of a `.ci/run` that finished")
    (unit, unit_s), (suite, suite_s) = summaries[0], summaries[-1]
    if bad := [w for w in ("failed", "errors", "error") if w in unit or w in suite]:
        raise ValueError(f"the run did not pass ({bad[0]} in its pytest summary): give a run that passed")
    commit = next((x.split()[-1] for x in lines if x.startswith("ci: commit ")), None)
    whole = next((float(x.split()[-2]) for x in lines if x.startswith("ci: passed in ")), None)
    files = {m["file"]: float(m["minutes"]) for m in map(FILE_TIME.match, lines) if m}
    return {
        "commit": commit,
        "whole_seconds": whole,
        "unit": {**unit, "seconds": unit_s},
        "suite": {**suite, "seconds": suite_s, "minutes": round(suite_s / 60, 1)},
        "minutes_per_file": files,
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--commit"):
        print("usage: tools/ci-times.py LOG [--commit SHA] (LOG: what .ci/run printed)", file=sys.stderr)
        return 2
    try:
        with open(argv[0], errors="replace") as f:
            result = read(f.read().splitlines())
    except (OSError, ValueError) as e:
        print(f"ci-times: {argv[0]}: {e}", file=sys.stderr)
        return 1
    if len(argv) == 3:
        result["commit"] = argv[2]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
