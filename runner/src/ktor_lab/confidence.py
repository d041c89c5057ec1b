"""A figure as a distribution over JVMs and windows, and a difference named only when a test says so.

A row of `lab run` is measured on several proxies (forks: JVMs, each warmed once) in several windows
each. What differs between JVMs (JIT decisions, code layout, GC sizing) is sampled only by forks,
so the unit of a row is a fork: the mean of its windows' logarithms. A row's figure is the
geometric mean of its forks (the centre its test is about), and its interval is Student's t with
the spread of forks pooled over every row of the group (`Pool`): with 2 forks a row, one row alone
says little of its spread, nine rows together do (9 degrees of freedom). With one fork a row (`lab
run --forks 1`), the units are its windows, and the interval is of that JVM, not of the engine.

Two rows differ on a figure when a t test on their units' logarithms, with the pooled spread, says
so: p < ALPHA, and the difference is above MIN_DIFFERENCE. Every comparison comes with the interval
of its ratio. A family of comparisons (everything a first screen claims) has its p values adjusted
by Benjamini-Hochberg, and its intervals by Benjamini-Yekutieli's rule for the selected (level
1 - R x ALPHA / m with R of m named), so that an interval excludes 0 exactly when its difference is
named. Whether that holds on JVMs that differ is checked by simulation in
`runner/tests/unit/test_verdict_simulation.py`. The statistics are scipy's.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import special, stats

CONFIDENCE = 0.95
ALPHA = 0.05
# Below this, a difference is never called one, whatever the test: the lab's own edges (a window's
# first and last requests, a scrape) move figures by about this much.
MIN_DIFFERENCE = 0.01
# The power the smallest detectable difference is given at (as a sample-size table gives it).
POWER = 0.8


@dataclass(frozen=True)
class Pool:
    """The spread of a figure's units pooled over a group's rows: the variance of one unit (on the
    log scale when `log`), its degrees of freedom, whether the units are forks or windows, and
    each fork's block effect (`blocks`: fork, shift), taken out of its units."""

    variance: float
    df: int
    log: bool
    by_fork: bool
    blocks: tuple[tuple[int, float], ...] = ()


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile (scipy's, cached: a report asks for the same few thousands of times)."""
    return float(stats.t.ppf(q, df))


def _scale(values: Sequence[float], log: bool) -> list[float]:
    return [math.log(v) for v in values] if log else [float(v) for v in values]


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


@dataclass(frozen=True)
class Estimate:
    """The windows of one figure of one row: their number, the centre (the geometric mean of the
    forks' means of logs; the plain mean when a window is 0 or below) with its 95% interval,
    median and range. None throughout when no window measured it. `forks` gives each window's
    fork; `pool` the group's spread the interval was made with."""

    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    median: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    values: tuple[float, ...] = ()
    forks: tuple[int, ...] = ()
    pool: Pool | None = None

    @classmethod
    def of(cls, values: Sequence[float | None], forks: Sequence[int] | None = None) -> Estimate:
        forks = list(forks) if forks is not None else [1] * len(values)
        pairs = [
            (float(v), f) for v, f in zip(values, forks, strict=True) if v is not None and not math.isnan(v)
        ]
        if not pairs:
            return cls(0)
        known = tuple(v for v, _ in pairs)
        e = cls(
            len(known),
            None,
            None,
            None,
            float(statistics.median(known)),
            min(known),
            max(known),
            known,
            tuple(f for _, f in pairs),
        )
        return e.with_pool(pool_of([e]))  # its own spread, until a group pools it

    @property
    def log(self) -> bool:
        return bool(self.values) and min(self.values) > 0

    def units(self, by_fork: bool, log: bool, blocks: tuple[tuple[int, float], ...] = ()) -> list[float]:
        """Per fork, the mean of its windows (of their logarithms when `log`) less its block's
        shift (`blocks`); every window alone when not `by_fork`."""
        if not by_fork:
            return _scale(self.values, log)
        # In plain Python, here and below: a row has a few windows, and numpy's overhead per call is
        # what a report (and the verdict's simulations, thousands of reports) would spend its time on.
        sums: dict[int, list[float]] = {}
        for v, f in zip(self.values, self.forks, strict=True):
            sums.setdefault(f, []).append(math.log(v) if log else v)
        shift = dict(blocks)
        return [_mean(xs) - shift.get(f, 0.0) for f, xs in sums.items()]

    def units_of(self, pool: Pool) -> list[float]:
        return self.units(pool.by_fork, pool.log, pool.blocks)

    def with_pool(self, pool: Pool | None) -> Estimate:
        """The centre and 95% interval under `pool` (None: the plain mean, no interval)."""
        if not self.values:
            return self
        log = pool.log if pool is not None else self.log
        u = self.units_of(pool) if pool is not None else self.units(True, log)
        centre = _mean(u)
        low = high = None
        if pool is not None and pool.df >= 1:
            half = t_quantile(0.5 + CONFIDENCE / 2, pool.df) * math.sqrt(pool.variance / len(u))
            low, high = centre - half, centre + half
        back = (lambda x: math.exp(x)) if log else (lambda x: x)
        return replace(
            self,
            mean=back(centre),
            low=None if low is None else back(low),
            high=None if high is None else back(high),
            pool=pool,
        )

    @property
    def fork_count(self) -> int:
        return len(set(self.forks))

    @property
    def half_width(self) -> float | None:
        """Half the 95% interval, as a share of the centre (benchstat's `±3%`); None without one."""
        if self.mean is None or self.low is None or self.high is None or self.mean == 0:
            return None
        return (self.high - self.low) / 2 / abs(self.mean)


def block_effects(estimates: Sequence[Estimate], log: bool) -> tuple[tuple[int, float], ...]:
    """Each fork's shift, common to every row: lab run measures one fork of every row at a time (a
    block), and what drifts between blocks (the machine, the other JVMs up) moves every row alike
    (in the default run of 2026-11-27 the second block read 10-27% lower CPU per request in 8 of 9
    rows). The mean over the rows with two forks or more of a fork's deviation from its row's
    mean; none when fewer than two such rows (a row alone cannot tell its block from itself)."""
    rows = [e for e in estimates if e.fork_count > 1]
    if len(rows) < 2:
        return ()
    deviations: dict[int, list[float]] = {}
    for e in rows:
        u = e.units(True, log)
        centre = _mean(u)
        for f, x in zip(dict.fromkeys(e.forks), u, strict=True):
            deviations.setdefault(f, []).append(x - centre)
    return tuple((f, _mean(d)) for f, d in sorted(deviations.items()))


def pool_of(estimates: Sequence[Estimate]) -> Pool | None:
    """The spread of units pooled over `estimates` (rows of one group, one figure): forks when any
    row has two or more (less their block's shift, `block_effects`), else windows. Each row adds
    (its units - 1) degrees of freedom, less one per block beyond the first; on the log scale when
    every window of every row is above 0. None when no degree of freedom is left."""
    measured = [e for e in estimates if e.values]
    if not measured:
        return None
    by_fork = any(e.fork_count > 1 for e in measured)
    log = all(e.log for e in measured)
    blocks = block_effects(measured, log) if by_fork else ()
    ss, df = 0.0, -max(0, len(blocks) - 1)
    for e in measured:
        u = e.units(by_fork, log, blocks)
        centre = _mean(u)
        ss += math.fsum((x - centre) ** 2 for x in u)
        df += len(u) - 1
    if df < 1:
        return None
    return Pool(ss / df, df, log, by_fork, blocks)


@dataclass(frozen=True)
class Comparison:
    """Row B against row A on one figure: (B - A) / A of the centres, the interval of that
    difference at `level`, and the test's p (adjusted when `family` > 1)."""

    a: Estimate
    b: Estimate
    p: float | None  # None: no spread to test with (one unit a side and no pool)
    difference: float | None
    low: float | None = None
    high: float | None = None
    level: float = CONFIDENCE
    family: int = 1
    # What the interval is made of: the difference on the test's scale, its standard error, df.
    d: float | None = None
    se: float | None = None
    df: int | None = None
    log: bool = True

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA

    @property
    def clear(self) -> bool:
        """A difference the report may name: the test says so, and it is above MIN_DIFFERENCE."""
        return self.significant and self.difference is not None and abs(self.difference) > MIN_DIFFERENCE

    def interval_at(self, level: float) -> Comparison:
        if self.se is None or self.d is None or self.df is None:
            return replace(self, level=level)
        half = self._half(level)
        return replace(self, low=self._back(self.d - half), high=self._back(self.d + half), level=level)

    def _half(self, level: float) -> float:
        """Half the interval of the difference at `level`, on the test's scale."""
        return t_quantile(0.5 + level / 2, self.df) * self.se

    def _back(self, x: float) -> float:
        if self.log:
            return math.exp(x) - 1
        return x / abs(self.a.mean) if self.a.mean else float("nan")

    def detectable(self, family: int | None = None) -> float | None:
        """The smallest difference (a share) this comparison finds POWER of the time at ALPHA over
        `family` comparisons (Bonferroni's share, the strictest a name can meet)."""
        if self.se is None or self.df is None:
            return None
        alpha = ALPHA / (family or self.family)
        x = (t_quantile(1 - alpha / 2, self.df) + t_quantile(POWER, self.df)) * self.se
        return math.exp(x) - 1 if self.log else x / abs(self.a.mean) if self.a.mean else None

    def units_span(self) -> str:
        """`-10.7 to +11.7`, the interval of the difference in the figure's own units: for a figure
        on the linear scale (some window at 0, as counts are), where a share of a centre near 0
        would read -2142% to +2342%."""
        if self.d is None or self.se is None or self.df is None:
            return ""
        half = self._half(self.level)
        return f"{self.d - half:+,.1f} to {self.d + half:+,.1f}"

    def span(self) -> str:
        """`-3.1% to +8.0%`, the interval of the difference."""
        if self.low is None or self.high is None:
            return ""
        return f"{self.low:+.1%} to {self.high:+.1%}"

    def words(self) -> str:
        """`+88.1% (+60.2% to +121.0%), p=0.0004 of 10`, `no clear difference (-3.1% to +8.0%)`,
        or `+700.0%, not tested (one window)`."""
        if self.difference is None:
            return "not measured"
        if self.p is None:
            return f"{self.difference:+.1%}, not tested (no spread to test with)"
        span = f" ({self.span()})" if self.span() else ""
        of = f" of {self.family}" if self.family > 1 else ""
        if self.clear:
            return f"{self.difference:+.1%}{span}, p={self.p:.2g}{of}"
        return f"no clear difference{span}, p={self.p:.2g}{of}"


# Measured windows per fork by default in `lab run`.
WINDOWS = 3
# Proxies (JVMs) per row by default: the unit the tests sample.
FORKS = 2
# At most this many spare windows per JVM by default, measured only when some of its windows are
# left out (a busy machine, the JIT): the row keeps its WINDOWS windows a JVM.
SPARE = 2


def compare(a: Estimate, b: Estimate, floor: float = MIN_DIFFERENCE) -> Comparison:
    """B against A: a t test on their units with the spread pooled over the group (the pool both
    carry; else the two rows' own), and the interval of the difference. `floor` is not used: the
    A/A pair checks the method, it does not move the threshold."""
    del floor
    if a.mean is None or b.mean is None:
        return Comparison(a, b, None, None)
    pool = a.pool if a.pool is not None and a.pool == b.pool else pool_of([a, b])
    log = pool.log if pool is not None else (a.log and b.log)
    if pool is not None:
        ua, ub = a.units_of(pool), b.units_of(pool)
    else:
        ua, ub = a.units(True, log), b.units(True, log)
    d = _mean(ub) - _mean(ua)
    difference = math.exp(d) - 1 if log else (d / abs(_mean(ua)) if _mean(ua) else None)
    if pool is None:
        return Comparison(a, b, None, difference, d=d, log=log)
    se = math.sqrt(pool.variance * (1 / len(ua) + 1 / len(ub)))
    return t_tested(a, b, d, difference, se, pool.df, log)


def t_tested(
    a: Estimate, b: Estimate, d: float, difference: float | None, se: float, df: int, log: bool = True
) -> Comparison:
    """The difference `d` on the test's scale (of logarithms when `log`), with its standard error on
    `df` degrees of freedom: the t test's p and the interval at CONFIDENCE (`difference`: `d` back
    on the figure's scale). With no spread at all, p is 0, or 1 when `d` is 0 too."""
    if se == 0:
        p = 1.0 if d == 0 else 0.0
        return Comparison(a, b, p, difference, difference, difference, d=d, se=0.0, df=df, log=log)
    p = float(
        2 * special.stdtr(df, -abs(d) / se)
    )  # Student's t tail: stats.t.sf's own, at a fraction of its cost
    return Comparison(a, b, p, difference, d=d, se=se, df=df, log=log).interval_at(CONFIDENCE)


def geometric_mean(values: Sequence[float | None]) -> float | None:
    """The centre of values above 0 (exp of the mean of their logarithms), the one the lab's
    figures and ratios give; None when there is none."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(_mean(logs)) if logs else None


def paired(ratios: Sequence[float]) -> Comparison | None:
    """Ratios of B to A taken in pairs (one per round of `lab bench`) as one difference: their
    geometric mean, a one-sample t test of their logarithms against 0 and its interval; no
    estimate of A or B alone (`a` and `b` are empty). None with fewer than two ratios above 0."""
    logs = [math.log(x) for x in ratios if x and x > 0]
    if len(logs) < 2:
        return None
    d, n = _mean(logs), len(logs)
    sd = math.sqrt(math.fsum((x - d) ** 2 for x in logs) / (n - 1))
    return t_tested(Estimate(0), Estimate(0), d, math.expm1(d), sd / math.sqrt(n), n - 1)


def adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """One family of comparisons: p values adjusted for their number (Benjamini-Hochberg, scipy's
    `false_discovery_control`), and intervals at 1 - R x ALPHA / m, R of the m named (1 - ALPHA / m
    when none is), so that each interval excludes 0 exactly when its difference is named."""
    tested = [i for i, c in enumerate(comparisons) if c.p is not None]
    out = list(comparisons)
    if len(tested) < 2:
        return out
    m = len(tested)
    adjusted = stats.false_discovery_control([comparisons[i].p for i in tested], method="bh")
    named = sum(1 for q in adjusted if q < ALPHA)
    level = 1 - max(named, 1) * ALPHA / m
    for i, q in zip(tested, adjusted, strict=True):
        out[i] = replace(comparisons[i], p=float(q), family=m).interval_at(level)
    return out
