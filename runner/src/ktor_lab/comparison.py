"""Two results of one plan, row by row and figure by figure: what `lab compare OLD NEW` prints.

benchstat for the lab. For each row both runs measured and each figure, the ratio NEW / OLD of the
row's geometric means, with its 95% interval and the p of a t test on the logarithms: the interval
and the test are one computation, so a change is named exactly when its interval leaves out 1.
Where p >= ALPHA the line shows `~` and still gives the interval: how large a change the runs
could have missed. Nothing is adjusted over the many lines (as benchstat): at 5% each, about one
line in twenty shows a change between two runs of one thing, and the header says how many lines
there are.

The test's units are what `lab run`'s verdict samples (confidence.py): with several JVMs a row
(`lab run --forks`, 2 by default) each JVM's geometric mean of its windows, so a change is one
between JVMs of either run, not between windows of two JVMs; with one JVM a row its windows, and a
change then also holds what differs between two JVMs of one case. With 2 JVMs a row one row alone
says little of their spread, so the spread is pooled over every row of the section in both runs
(each run's own drift between its blocks of JVMs taken out), as the verdict pools it over a group.

Which windows count is the verdict's rule (rules.py), so that a run's report and `lab compare` read
the same windows alike: a row's windows not warm, on a busy machine or with missed scrapes are left
out (unless the engine itself failed in them, or too few would be left), and counted; a row whose
kept windows are flagged so that a figure does not compare (errors, a saturated generator, ...) or,
at a fixed rate, fell short of it, is not tested on that figure, and says why.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields, replace

from . import verdict
from .cases import DIMENSIONS, Case
from .confidence import ALPHA, Estimate, Pool, compare, geometric_mean, pool_of
from .results import Results, Run
from .rules import BY_KEY, COMPARED_FIGURES, Figure, jvm_values, kept_windows, why_not_compared

CASE_FIELDS = {f.name: f for f in fields(Case)}
# Added to the new run's fork numbers: its JVMs are blocks of their own, apart from the old run's.
NEW_FORKS = 1000


@dataclass(frozen=True)
class Change:
    """One row and figure, OLD against NEW."""

    section: str  # scenario and load
    row: str
    figure: Figure
    old: tuple[float, ...]
    new: tuple[float, ...]
    left_out: tuple[int, int]  # windows of each side flagged and left out
    why_not: str = ""  # why the row is not tested on the figure (rules.why_not_compared), "" when it is
    ratio: float | None = None  # NEW / OLD, of the geometric means
    low: float | None = None
    high: float | None = None
    p: float | None = None
    # The rows' JVMs replicated (the units JVMs, or windows pooled with them: confidence.pooled_windows),
    # or one JVM a row (False: its windows); None: not tested.
    by_fork: bool | None = None

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA

    def words(self) -> str:
        """`+4.1% [+1.0%, +7.3%] p=0.012`, `~ [-2.0%, +10.3%] p=0.42`, or why it is not tested."""
        if self.ratio is None:
            if self.why_not:
                return self.why_not
            if self.old and self.new and min(self.old + self.new) <= 0:
                return "not tested: a window at 0"
            return "not tested: no spread to test with (one window a side, no other row)"
        span = f"[{self.low - 1:+.1%}, {self.high - 1:+.1%}] p={self.p:.2g}"
        return f"{self.ratio - 1:+.1%} {span}" if self.significant else f"~ {span}"


def _windows(runs: list[Run], figure: Figure) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The figure's values in `runs` (a row's kept windows) and the fork (JVM) of each: one a JVM for a
    latency histogram's percentile (rules.jvm_values)."""
    values, forks = jvm_values(figure, runs)
    pairs = [(float(v), f) for v, f in zip(values, forks, strict=True) if v is not None and not math.isnan(v)]
    return tuple(v for v, _ in pairs), tuple(f for _, f in pairs)


def estimates(old: list[Run], new: list[Run], figure: Figure) -> tuple[Estimate, Estimate]:
    """A row's figure in either run (confidence.Estimate over its kept windows and their JVMs), the
    new run's JVMs numbered apart from the old's (they are other blocks)."""
    a, forks_a = _windows(old, figure)
    b, forks_b = _windows(new, figure)
    return Estimate.of(a, forks_a), Estimate.of(b, [f + NEW_FORKS for f in forks_b])


def pooled_spread(rows: list[tuple[Estimate, Estimate]]) -> Pool | None:
    """The spread of one figure's units pooled over every row of both runs: each run's pool (its
    rows, less its own blocks' drift) summed by degrees of freedom. None when neither has any."""
    both = [pair for pair in rows if pair[0].values and pair[1].values and pair[0].log and pair[1].log]
    a, b = (pool_of([pair[side] for pair in both]) for side in (0, 1))
    if a is None or b is None or a.by_fork != b.by_fork:  # one run's spread alone, or both as one
        return pool_of([e for pair in both for e in pair])
    df = a.df + b.df
    return Pool(
        (a.variance * a.df + b.variance * b.df) / df,
        df,
        a.log,
        a.by_fork,
        a.blocks + b.blocks,
        a.pooled and b.pooled,
    )


def change(
    section: str, row: str, figure: Figure, pair: tuple[Estimate, Estimate], left_out, pool, why_not: str = ""
) -> Change:
    """OLD against NEW on one row and figure, tested with the spread `pool` (pooled_spread), unless
    a side is not compared on it (`why_not`)."""
    a, b = pair
    c = Change(section, row, figure, a.values, b.values, left_out, why_not=why_not)
    if why_not or not a.values or not b.values or pool is None or min(a.values + b.values) <= 0:
        return c
    test = compare(a.with_pool(pool), b.with_pool(pool))
    if test.p is None or test.low is None or test.high is None:
        return c
    return replace(
        c,
        ratio=1 + test.difference,
        low=1 + test.low,
        high=1 + test.high,
        p=test.p,
        by_fork=pool.by_fork or pool.pooled,
    )


def _values(results: Results, dimension) -> set:
    """The values of a dimension a run's windows ran with (the release and JDK as the proxy
    reported them, named in the rows or not)."""
    return {r.dim(dimension.field) for r in results.runs}


def held(old: Results, new: Results) -> list:
    """The dimensions each run held at one value throughout: the rows are paired without them."""
    return [d for d in DIMENSIONS if len(_values(old, d)) == len(_values(new, d)) == 1]


def changed_dimensions(old: Results, new: Results) -> dict[str, tuple[str, str]]:
    """What a user changed between the runs among the dimensions (Ktor release, JDK, ...): each run
    held it at one value, a different one in each. {word: (old, new)}."""
    out = {}
    for d in held(old, new):
        (a,), (b,) = _values(old, d), _values(new, d)
        if a != b:
            out[d.word] = (d.show(a) if a is not None else "?", d.show(b) if b is not None else "?")
    return out


def _by_row(results: Results, across: list) -> dict[tuple[str, str], list[Run]]:
    """The runs by scenario and load, and row: its case with the dimensions in `across` set back to
    their defaults (each run held them at one value), so that the two runs' rows meet."""
    defaults = {d.field: CASE_FIELDS[d.field].default for d in across}
    rows: dict[tuple[str, str], list[Run]] = {}
    for r in results.runs:
        name = Case.parse(r.variant).with_dimensions(**defaults).name + (f" #{r.copy}" if r.copy else "")
        rows.setdefault((f"{r.scenario} {r.load.label}", name), []).append(r)
    return rows


def changes(old: Results, new: Results, figures: tuple[str, ...] = COMPARED_FIGURES) -> list[Change]:
    """Every row both measured, every figure either measured: OLD against NEW on each row's kept
    windows (rules.kept_windows), rows paired without the dimensions each run held at one value (a
    Ktor release or JDK changed between them), each figure's spread pooled over the rows of its
    section (scenario and load) in both runs that compare on it."""
    for r in (*old.runs, *new.runs):  # once each, by today's rules, whatever the runs recorded
        r.verdict = verdict.judge(r)
    across = held(old, new)
    a, b = _by_row(old, across), _by_row(new, across)
    keys = [k for k in a if k in b]
    kept = {k: (kept_windows(a[k]), kept_windows(b[k])) for k in keys}
    found: dict[tuple[tuple[str, str], str], Change] = {}
    for section in dict.fromkeys(k[0] for k in keys):
        rows = [k for k in keys if k[0] == section]
        for name in figures:
            figure = BY_KEY[name]
            made, why = {}, {}
            for k in rows:
                (runs_a, left_a), (runs_b, left_b) = kept[k]
                made[k] = (*estimates(runs_a, runs_b, figure), (len(left_a), len(left_b)))
                why[k] = why_not_compared(figure, runs_a[0].load, runs_a, runs_b)
            pool = pooled_spread([(x, y) for k, (x, y, _) in made.items() if not why[k]])
            for k, (x, y, left) in made.items():
                found[k, name] = change(*k, figure, (x, y), left, pool, why[k])
    out = (found[k, name] for k in keys for name in figures)
    return [c for c in out if c.old or c.new]


def mismatch(old: Results, new: Results) -> str | None:
    """Why OLD and NEW are not two runs of one plan on one kind of machine; None when they are."""
    po, pn = old.plan, new.plan
    what = {
        "cases": ([c.id for c in po.cases], [c.id for c in pn.cases]),
        "scenarios": (po.scenarios, pn.scenarios),
        "loads": ([x.label for x in po.loads], [x.label for x in pn.loads]),
        "backend": (old.backend.get("kind"), new.backend.get("kind")),
        "Locust workers": (po.workers, pn.workers),
        "window seconds": (po.duration_s, pn.duration_s),
        "warm-up seconds": (po.warmup_s, pn.warmup_s),
        "warm-up's JIT share": (_jit_share(old), _jit_share(new)),
        "settle seconds": (po.settle_s, pn.settle_s),
        "forks": (po.forks, pn.forks),
        "fresh proxies": (po.fresh, pn.fresh),
        "jitter ms": (po.jitter_ms, pn.jitter_ms),
        "bandwidth KB/s": (po.bandwidth_kbps, pn.bandwidth_kbps),
    }
    for name, (x, y) in what.items():
        if x != y:
            x, y = ("not recorded" if v is None else v for v in (x, y))
            return f"they ran different plans ({name}: {x} against {y})"
    mo, mn = (r.environment.get("machine", {}) for r in (old, new))
    for key in ("cpus", "cpu_model"):
        if mo.get(key) != mn.get(key):
            return f"they ran on different machines ({key}: {mo.get(key)} against {mn.get(key)})"
    return None


def _jit_share(results: Results) -> float | None:
    """The share of a core under which the run's warm-ups waited for the JIT (warmup.JIT_QUIET_SHARE
    when it ran); None when no warm-up saw the JIT."""
    shares = (r.warmup.jit_quiet_share for r in results.runs if r.warmup and r.warmup.jit_quiet_share)
    return next(shares, None)


def what_changed(old: Results, new: Results) -> list[str]:
    """What differs between the runs that a user changes on purpose: the dimensions each held at a
    value of its own (the rows are paired across them), the proxy's settings and JVM options."""
    out = [f"{word}: {a} -> {b}" for word, (a, b) in changed_dimensions(old, new).items()]
    if old.plan.proxy_env != new.plan.proxy_env:
        out.append(f"proxy settings: {old.plan.proxy_env or 'none'} -> {new.plan.proxy_env or 'none'}")
    if old.plan.java_opts != new.plan.java_opts:
        out.append(f"proxy JVM options: {old.plan.java_opts!r} -> {new.plan.java_opts!r}")
    return out


def lines(old_name: str, new_name: str, found: list[Change], changed: list[str] = ()) -> list[str]:
    """The comparison as text: a header, then per scenario and load one line per row and figure."""
    named = sum(c.significant for c in found)
    tested = sum(c.p is not None for c in found)
    out = [
        f"NEW {new_name} against OLD {old_name}"
        + (f" ({'; '.join(changed)})" if changed else "")
        + ": the ratio NEW/OLD of each row's geometric mean, its 95% interval and a t test on the logs "
        "of its JVMs (each the geometric mean of its windows), their spread pooled over the rows of "
        f"both runs; ~ where p >= {ALPHA:g}.",
        f"{tested} lines tested, {named} with a change; at {ALPHA:g} each, about {tested * ALPHA:.1f} of "
        f"{tested} would show one between two runs of one thing.",
    ]
    if any(c.by_fork is False for c in found):
        out[1] += (
            " With one JVM a row (--forks 1) the units are its windows: a change then also holds what "
            "two JVMs of one case differ by (an A/A pair of the plan shows how much)."
        )
    out.append(
        "Between two runs the machine moves every row alike (docs/matrix.md): a change that every row "
        "shows (each section's first line) is the machine's as much as the change's; to measure a "
        "release or setting, make it a dimension of one run (lab run --ktor 3.4.1,3.5.2), whose "
        "windows interleave."
    )
    width = max([len(c.row) for c in found] + [len(EVERY_ROW)])
    fwidth = max([len(c.figure.heading) for c in found] + [6])
    section = None
    for c in found:
        if c.section != section:
            section = c.section
            out += ["", section, f"{'row':<{width}}  {'figure':<{fwidth}}  {'old':>22}  {'new':>22}  change"]
            out.append(f"{EVERY_ROW:<{width}}  {every_row(found, section)}")
        left = (
            ""
            if c.left_out == (0, 0)
            else f"  (left out: {c.left_out[0]} and {c.left_out[1]} flagged windows)"
        )
        out.append(
            f"{c.row:<{width}}  {c.figure.heading:<{fwidth}}  {_centre(c.old, c.figure):>22}  "
            f"{_centre(c.new, c.figure):>22}  {c.words()}{left}"
        )
    return out


EVERY_ROW = "every row"


def every_row(found: list[Change], section: str) -> str:
    """What all of a section's rows moved by, figure by figure: the geometric mean of their ratios
    NEW/OLD (`rps +0.0%, CPU s / 1000 req +8.8% (9 rows)`); not a test: a shift the two runs share
    cannot be told from the machine's between them."""
    parts = []
    for key in dict.fromkeys(c.figure.key for c in found if c.section == section):
        ratios = [c.ratio for c in found if c.section == section and c.figure.key == key and c.ratio]
        if ratios:
            heading = next(c.figure.heading for c in found if c.figure.key == key)
            parts.append(f"{heading} {geometric_mean(ratios) - 1:+.1%}")
    rows = len({c.row for c in found if c.section == section and c.ratio})
    if not rows:
        return "no row compared"
    return "the geometric mean of the rows' changes: " + ", ".join(parts) + f" ({rows} rows)"


def _centre(values: tuple[float, ...], figure: Figure) -> str:
    """The geometric mean of the windows with n (the arithmetic one where a window is 0)."""
    if not values:
        return "-"
    mean = geometric_mean(values) if min(values) > 0 else statistics.fmean(values)
    return f"{mean:,.{figure.digits}f} n={len(values)}"
