"""Two results of one plan, row by row and figure by figure: what `lab compare OLD NEW` prints.

benchstat for the lab. For each row both runs measured and each figure, the ratio NEW / OLD of the
geometric means of the windows, with its 95% interval and the p of Welch's t-test on the windows'
logarithms (scipy): the interval and the test are one computation, so a change is named exactly
when its interval leaves out 1. Where p >= ALPHA the line shows `~` and still gives the interval:
how large a change the runs could have missed. Nothing is adjusted over the many lines (as
benchstat): at 5% each, about one line in twenty shows a change between two runs of one thing,
and the header says how many lines there are.

Windows flagged for errors, a busy machine or a saturated generator are left out, and counted.
Where a run has several JVMs a row (`lab run --forks`, 2 by default), the test's units are the
JVMs (each its windows' geometric mean), so a change is one between JVMs of either run, not
between windows of two JVMs; with one JVM a row the units are its windows, and a change also holds
what differs between two JVMs of one case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
from scipy import stats

from . import verdict
from .cases import DIMENSIONS, Case
from .conclusions import BY_KEY, Figure
from .confidence import ALPHA, CONFIDENCE, Estimate
from .results import Results, Run

CASE_FIELDS = {f.name: f for f in fields(Case)}

# The figures compared, in their order (conclusions.FIGURES' keys): positive in every window.
FIGURES = ("rps", "p50", "p99", "cpu_no_jit", "cpu", "threads", "heap")
# A window with one of these flags does not measure the case: it is left out (and counted).
LEFT_OUT = ("errors", "machine-busy", "generator-saturated")


@dataclass(frozen=True)
class Change:
    """One row and figure, OLD against NEW."""

    section: str  # scenario and load
    row: str
    figure: Figure
    old: tuple[float, ...]
    new: tuple[float, ...]
    left_out: tuple[int, int]  # windows of each side flagged and left out
    ratio: float | None = None  # NEW / OLD, of the geometric means
    low: float | None = None
    high: float | None = None
    p: float | None = None

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA

    def words(self) -> str:
        """`+4.1% [+1.0%, +7.3%] p=0.012`, `~ [-2.0%, +10.3%] p=0.42`, or why it is not tested."""
        if self.ratio is None:
            n = min(len(self.old), len(self.new))
            return "not tested: " + ("fewer than 2 windows a side" if n < 2 else "a window at 0")
        span = f"[{self.low - 1:+.1%}, {self.high - 1:+.1%}] p={self.p:.2g}"
        return f"{self.ratio - 1:+.1%} {span}" if self.significant else f"~ {span}"


def _windows(runs: list[Run], figure: Figure) -> tuple[tuple[float, ...], tuple[int, ...], int]:
    """The figure's windows and the fork (JVM) of each, but those flagged by today's rules
    (verdict.judge, as lab report judges them again) as LEFT_OUT; and how many were left out."""
    kept, forks, left = [], [], 0
    for r in runs:
        v = figure.get(r)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if set(verdict.judge(r).flags) & set(LEFT_OUT):
            left += 1
            continue
        kept.append(float(v))
        forks.append(r.fork)
    return tuple(kept), tuple(forks), left


def units(values: tuple[float, ...], forks: tuple[int, ...], by_fork: bool) -> np.ndarray:
    """What the test compares: each JVM's geometric mean over its windows, or every window
    (confidence.Estimate's units, back from the logs)."""
    return np.exp(Estimate.of(values, forks).units(by_fork, log=True))


def ratio_test(old, new) -> tuple:
    """NEW / OLD of the geometric means, the low and high ends of its 95% interval, and Welch's p,
    over the last axis of two arrays of positive windows (one comparison, or many draws at once)."""
    la, lb = np.log(old), np.log(new)
    test = stats.ttest_ind(lb, la, axis=-1, equal_var=False)
    interval = test.confidence_interval(CONFIDENCE)
    return np.exp(lb.mean(-1) - la.mean(-1)), np.exp(interval.low), np.exp(interval.high), test.pvalue


def change(section: str, row: str, figure: Figure, old: list[Run], new: list[Run]) -> Change:
    a, forks_a, left_a = _windows(old, figure)
    b, forks_b, left_b = _windows(new, figure)
    c = Change(section, row, figure, a, b, (left_a, left_b))
    if not a or not b or min(a + b) <= 0:
        return c
    by_fork = len(set(forks_a)) > 1 or len(set(forks_b)) > 1
    a, b = tuple(units(a, forks_a, by_fork)), tuple(units(b, forks_b, by_fork))
    if len(a) < 2 or len(b) < 2:
        return c
    if len(set(a)) == 1 and len(set(b)) == 1:  # constant windows: the test is undefined there
        ratio = b[0] / a[0]
        return replace(c, ratio=ratio, low=ratio, high=ratio, p=1.0 if ratio == 1 else 0.0)
    ratio, low, high, p = (float(x) for x in ratio_test(np.array(a), np.array(b)))
    return replace(c, ratio=ratio, low=low, high=high, p=p)


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


def changes(old: Results, new: Results, figures: tuple[str, ...] = FIGURES) -> list[Change]:
    """Every row both measured, every figure either measured: OLD against NEW, rows paired without
    the dimensions each run held at one value (a Ktor release or JDK changed between them)."""
    across = held(old, new)
    a, b = _by_row(old, across), _by_row(new, across)
    out = []
    for key in [k for k in a if k in b]:
        for name in figures:
            figure = BY_KEY[name]
            c = change(*key, figure, a[key], b[key])
            if c.old or c.new:
                out.append(c)
    return out


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
        "forks": (po.forks, pn.forks),
        "fresh proxies": (po.fresh, pn.fresh),
        "jitter ms": (po.jitter_ms, pn.jitter_ms),
        "bandwidth KB/s": (po.bandwidth_kbps, pn.bandwidth_kbps),
    }
    for name, (x, y) in what.items():
        if x != y:
            return f"they ran different plans ({name}: {x} against {y})"
    mo, mn = (r.environment.get("machine", {}) for r in (old, new))
    for key in ("cpus", "cpu_model"):
        if mo.get(key) != mn.get(key):
            return f"they ran on different machines ({key}: {mo.get(key)} against {mn.get(key)})"
    return None


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
        + ": the ratio NEW/OLD of the windows' geometric means, "
        f"its 95% interval and Welch's t on the windows' logs; ~ where p >= {ALPHA:g}.",
        f"{tested} lines tested, {named} with a change; at {ALPHA:g} each, about {tested * ALPHA:.1f} of "
        f"{tested} would show one between two runs of one thing. A row's windows come from one JVM: "
        "an A/A run of the plan shows what two JVMs of one case differ by.",
    ]
    width = max([len(c.row) for c in found] + [3])
    fwidth = max([len(c.figure.heading) for c in found] + [6])
    section = None
    for c in found:
        if c.section != section:
            section = c.section
            out += ["", section, f"{'row':<{width}}  {'figure':<{fwidth}}  {'old':>22}  {'new':>22}  change"]
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


def _centre(values: tuple[float, ...], figure: Figure) -> str:
    """The geometric mean of the windows with n (the arithmetic one where a window is 0)."""
    if not values:
        return "-"
    mean = math.exp(float(np.log(values).mean())) if min(values) > 0 else float(np.mean(values))
    return f"{mean:,.{figure.digits}f} n={len(values)}"
