"""CPU s / 1000 req per case and Ktor release (or JDK), with and without the JIT's CPU, each pair
compared with Mann-Whitney U over the windows (scipy).

    .venv/bin/python docs/studies/versions/five-windows-b/without_jit.py RUNS.json [ktor|java]
"""

import json
import sys
from collections import defaultdict
from statistics import mean

from scipy.stats import mannwhitneyu


def windows(path: str, key: str) -> dict:
    """case -> release or JDK (`key`) -> (CPU per 1000 requests, the same less the JIT's), one value a window."""
    out: dict = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for run in json.load(open(path))["runs"]:
        p = run["proxy"]
        if not p.get("upstream_requests"):
            continue
        jit = p.get("jit_cpu_seconds_in_window") or 0.0
        with_jit, without = out[run["case"]][run[key]]
        with_jit.append(p["cpu_seconds"] / p["upstream_requests"] * 1000)
        without.append((p["cpu_seconds"] - jit) / p["upstream_requests"] * 1000)
    return out


def main(path: str, key: str = "ktor") -> None:
    for case, by in sorted(windows(path, key).items()):
        old, new = sorted(by)
        line = [case, f"{old} -> {new}", f"n={len(by[old][0])}/{len(by[new][0])}"]
        for i, label in ((0, "with the JIT"), (1, "without")):
            a, b = by[old][i], by[new][i]
            p = mannwhitneyu(a, b, alternative="two-sided").pvalue
            line.append(f"{label}: {mean(a):.3f} -> {mean(b):.3f} ({(mean(b) / mean(a) - 1) * 100:+.1f}%) p={p:.2g}")
        print(" | ".join(line))


if __name__ == "__main__":
    main(*sys.argv[1:3])
