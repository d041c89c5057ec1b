"""`lab study replay`: a published load-test setup, next to measurements that rank engines.

The setup ran 1000 Locust users with a 1-2 s wait against singleton and per-call CIO and Apache,
and read the rps as the engines' speed. This runs that load (flagged `load-model` by the verdict
rules: the users' wait sets the rate) beside the same four cases at fixed rates (equal work, so
latency, CPU and threads compare) and in a closed loop without wait (what each case can do), as
one `lab run`. Its words put the published figures beside the replayed ones, rank the cases by
their capacity, and name the highest fixed rate each case held.
"""

from __future__ import annotations

from dataclasses import replace

from .. import conclusions, rules
from ..results import Results
from .plans import Part, PlanStudy

CASES = "singleton-cio,singleton-apache,per-call-cio,per-call-apache"
REPLAYED = "closed/1000/1-2"
RATES = (250, 500, 1000, 2000)
CAPACITY = "closed/50/0"
# What the setup published (../shared/DESIGN.md): rps and median ms.
PUBLISHED = {
    "singleton-cio": (600, 100),
    "singleton-apache": (500, 400),
    "per-call-cio": (280, 2000),
    "per-call-apache": (150, 5000),
}
# A fixed rate counts as held when every window reached it, without errors, p99 at most this.
HELD_P99_MS = 1000.0


def held(row: conclusions.Row) -> bool:
    p99 = row.figures["p99"].mean
    return all("target" in r.verdict.flags and "errors" not in r.verdict.flags for r in row.runs) and (
        p99 is not None and p99 <= HELD_P99_MS
    )


def replayed(g: conclusions.Group) -> bool:
    """Whether the group is at a load like the published one: users that wait between requests."""
    return g.load.model == "closed" and g.load.wait_max > 0


def words(results: dict[str, Results]) -> list[str]:
    """The published figures beside the replayed ones; the cases by capacity (a closed loop without
    wait); the highest fixed rate each case held."""
    out = []
    for r in results.values():
        gs = conclusions.groups(r)
        for g in gs:
            if not replayed(g):
                continue
            said = []
            for row in g.rows:
                rps, p50 = PUBLISHED.get(row.case.id, (None, None))
                if rps is None or row.copy > 1:
                    continue
                f = row.figures
                said.append(
                    f"{row.called.removesuffix(' #1')} published {rps} rps, p50 {p50} ms; "
                    f"here {f['rps'].mean or 0:,.0f} rps, "
                    f"p50 {f['p50'].mean or 0:,.0f} ms ({', '.join(row.flags) or 'no flag'})"
                )
            if said:
                out.append(
                    f"The published setup replayed ({g.load.label}: the users' wait sets the rate, not "
                    "the engine): " + "; ".join(said) + "."
                )
        best: dict[str, float] = {}
        for g in gs:
            if g.load.model == "rate":
                for row in g.rows:
                    if row.copy <= 1 and held(row):
                        best[row.case.id] = max(best.get(row.case.id, 0.0), g.load.target_rps or 0.0)
        for g in gs:
            if g.load.model == "closed" and g.load.wait_max == 0:
                # one row a case: the A/A pair's first copy, named as its case
                rows = [replace(row, said=row.called.removesuffix(" #1")) for row in g.rows if row.copy <= 1]
                ranked = conclusions.standing(g, rules.BY_KEY["rps"], rows)
                out.append(
                    f"Capacity ({g.load.label}: a closed loop without wait, each case as fast as it "
                    f"answers): {conclusions.standing_sentence(ranked)}"
                )
        cases = dict.fromkeys(run.case for run in r.runs)
        if any(g.load.model == "rate" for g in gs):
            out.append(
                f"The highest fixed rate held (every window at its target, no errors, p99 <= {HELD_P99_MS:g} "
                "ms): "
                + "; ".join(f"{c} {best[c]:,.0f} rps" if c in best else f"{c} none" for c in cases)
                + "."
            )
    return out


STUDY = PlanStudy(
    name="replay",
    title="A published setup replayed, beside fixed rates and capacity",
    help="1000 users with a 1-2 s wait (a published setup) beside fixed rates and capacity",
    question="Does 1000 users with a 1-2 s wait rank the engines, as a published setup read it? The same "
    "four cases under that load, at fixed rates of equal work and in a closed loop without wait; at each "
    "load the engines and lifetimes are weighed over the JVMs, each difference with its interval.",
    parts=(
        Part(
            "loads",
            "the published load, fixed rates, and a closed loop without wait",
            ("--cases", CASES, "--loads", ",".join([REPLAYED, *(f"rate/{r}" for r in RATES), CAPACITY])),
        ),
    ),
    words=words,
)
