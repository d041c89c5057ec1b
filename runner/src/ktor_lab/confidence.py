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

from scipy import optimize, special, stats

CONFIDENCE = 0.95
ALPHA = 0.05
# Below this, a difference is never called one, whatever the test: the lab's own edges (a window's
# first and last requests, a scrape) move figures by about this much.
MIN_DIFFERENCE = 0.01
# The power the smallest detectable difference is given at (as a sample-size table gives it).
POWER = 0.8
# The fewest degrees of freedom a detectable difference is stated from. With one (two cases, two
# JVMs each: test_close_calls.py), the spread is a guess: the median of the differences the runs
# stated was found in 55% of runs, not 80%; from 7 (the default nine rows) it holds.
POWER_DF = 2
# The level of the test of whether JVMs of one row spread more than their windows explain: where
# it finds nothing, the windows are the units, pooled with the JVMs' (Bancroft's sometimes-pool;
# at 0.5 the verdict's error stayed near its rate in simulation where JVMs spread by 5%).
POOL_ALPHA = 0.5
# Two rows are "the same" when the interval of their difference lies within this share either way
# (on the ratio: 1/1.1 to 1.1): lab run --margin.
MARGIN = 0.10
# What a comparison decided: a difference (its interval leaves out 0), the same within the margin
# (its interval lies inside it: both one-sided tests at the margin, TOST), or neither yet.
DIFFERENT, SAME, UNKNOWN = "different", "same", "unknown"
# The fewest degrees of freedom of the JVMs' spread that test can be made on: with fewer (two rows of
# two JVMs have one) it could not find a spread that is there, and the JVMs stay the units.
POOL_MIN_DF = 4


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
    # Windows as units although the rows have several JVMs: their spread beyond the windows' was
    # not found (POOL_ALPHA), so each window counts, less its block's shift.
    pooled: bool = False


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """Student's t quantile (scipy's, cached: a report asks for the same few thousands of times)."""
    return float(stats.t.ppf(q, df))


@functools.lru_cache(maxsize=1024)
def power_shift(alpha: float, df: int, power: float = POWER) -> float:
    """The true difference, in standard errors, that a two-sided t test at `alpha` on `df` degrees
    of freedom finds `power` of the time: where the noncentral t's mass beyond the critical values
    is `power` (scipy's nct). The sum t(1 - alpha/2) + t(power) that sample-size tables use for
    large samples falls short at few degrees of freedom, the more so at a family's share of ALPHA
    (68% power at 2, 73% at 4, 78% at 10, at 0.005)."""
    crit = t_quantile(1 - alpha / 2, df)

    def short(shift: float) -> float:
        # The lower tail as the upper one of the mirrored shift: scipy's cdf far out there is NaN.
        return float(stats.nct.sf(crit, df, shift) + stats.nct.sf(crit, df, -shift)) - power

    high = crit + t_quantile(power, df)
    for _ in range(60):  # doubled until it is found enough: a bounded search
        if short(high) >= 0:
            break
        high *= 2
    return float(optimize.brentq(short, 0.0, high, xtol=1e-6))


@functools.lru_cache(maxsize=4096)
def f_quantile(q: float, df1: int, df2: int) -> float:
    """The F distribution's quantile (scipy's, cached)."""
    return float(stats.f.ppf(q, df1, df2))


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
    def of(
        cls, values: Sequence[float | None], forks: Sequence[int] | None = None, own: bool = True
    ) -> Estimate:
        """The windows under their own spread; not `own`: their values alone (no mean), for a pool."""
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
        return e.with_pool(pool_of([e])) if own else e  # its own spread, until a group pools it

    @property
    def log(self) -> bool:
        return bool(self.values) and min(self.values) > 0

    def units(self, by_fork: bool, log: bool, blocks: tuple[tuple[int, float], ...] = ()) -> list[float]:
        """Per fork, the mean of its windows (of their logarithms when `log`) less its block's
        shift (`blocks`); every window alone when not `by_fork`."""
        if not by_fork:
            shift = dict(blocks)
            return [x - shift.get(f, 0.0) for x, f in zip(_scale(self.values, log), self.forks, strict=True)]
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
    rows). The rows with two forks or more, their JVMs' means fitted as a row's centre plus its
    block's shift (least squares, by alternating the two: a close call's later blocks hold only the
    rows it measures again); none when fewer than two such rows (a row alone cannot tell its block
    from itself). The shifts are centred on the first block's."""
    rows = [e for e in estimates if e.fork_count > 1]
    if len(rows) < 2:
        return ()
    units = [dict(zip(dict.fromkeys(e.forks), e.units(True, log), strict=True)) for e in rows]
    shift: dict[int, float] = {f: 0.0 for u in units for f in u}
    for _ in range(BLOCK_FIT_ROUNDS):
        centres = [_mean([x - shift[f] for f, x in u.items()]) for u in units]
        by: dict[int, list[float]] = {}
        for u, centre in zip(units, centres, strict=True):
            for f, x in u.items():
                by.setdefault(f, []).append(x - centre)
        moved = {f: _mean(d) for f, d in by.items()}
        done = max(abs(moved[f] - shift[f]) for f in shift) < 1e-12
        shift = moved
        if done:
            break
    first = _mean([shift[f] for f in shift])  # centred, as the means of deviations were
    return tuple((f, shift[f] - first) for f in sorted(shift))


# Alternations that fit the blocks' shifts: a complete design (every row in every block) is fitted
# in one; a few dozen fit a close call's incomplete blocks to well under a rounding error.
BLOCK_FIT_ROUNDS = 50


def pool_of(estimates: Sequence[Estimate]) -> Pool | None:
    """The spread of units pooled over `estimates` (rows of one group, one figure): forks when any
    row has two or more (less their block's shift, `block_effects`), else windows; and windows, less
    their block's shift, where the forks spread no more than their windows explain (`pooled_windows`).
    Each row adds (its units - 1) degrees of freedom, less one per block beyond the first; on the log
    scale when every window of every row is above 0. None when no degree of freedom is left."""
    measured = [e for e in estimates if e.values]
    if not measured:
        return None
    by_fork = any(e.fork_count > 1 for e in measured)
    log = all(e.log for e in measured)
    blocks = block_effects(measured, log) if by_fork else ()
    pool = _pooled(measured, by_fork, log, blocks)
    if pool is None or not by_fork:
        return pool
    return pooled_windows(measured, pool) or pool


def _pooled(measured: Sequence[Estimate], by_fork: bool, log: bool, blocks) -> Pool | None:
    ss, df = 0.0, -max(0, len(blocks) - 1)
    for e in measured:
        u = e.units(by_fork, log, blocks)
        centre = _mean(u)
        ss += math.fsum((x - centre) ** 2 for x in u)
        df += len(u) - 1
    return Pool(ss / df, df, log, by_fork, blocks) if df >= 1 else None


def pooled_windows(measured: Sequence[Estimate], forks: Pool) -> Pool | None:
    """The windows as units, less their block's shift, where the JVMs' means spread no more than
    their windows explain: the F test of the JVMs' spread (their pooled variance `forks`) against
    the windows' within their JVMs, scaled to a JVM's mean, finds nothing at POOL_ALPHA. None
    where it finds a spread, or without windows to tell (one window a JVM)."""
    ss, df, inverse, jvms = 0.0, 0, 0.0, 0
    for e in measured:
        by: dict[int, list[float]] = {}
        for x, f in zip(_scale(e.values, forks.log), e.forks, strict=True):
            by.setdefault(f, []).append(x)
        for xs in by.values():
            centre = _mean(xs)
            ss += math.fsum((x - centre) ** 2 for x in xs)
            df += len(xs) - 1
            inverse, jvms = inverse + 1 / len(xs), jvms + 1
    if df < 1 or ss <= 0 or forks.df < POOL_MIN_DF:
        return None
    within = ss / df * inverse / jvms  # what the windows' spread alone gives a JVM's mean
    if forks.variance > within * f_quantile(1 - POOL_ALPHA, forks.df, df):
        return None
    windows = _pooled(measured, False, forks.log, forks.blocks)
    return windows and replace(windows, pooled=True)


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
    alpha: float = ALPHA  # the level its family was tested at (a close call's look spends less: look_alpha)

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < self.alpha

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
        `family` comparisons (Bonferroni's share, the strictest a name can meet), taking its
        standard error as the spread's: `power_shift` of them; None below POWER_DF degrees of
        freedom, where the spread it rests on is too unsure to say one."""
        if self.se is None or self.df is None or self.df < POWER_DF:
            return None
        x = power_shift(ALPHA / (family or self.family), self.df) * self.se
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

    def decision(self, margin: float = MARGIN) -> str:
        """SAME where both one-sided tests at the margin reject at the comparison's level (TOST:
        its interval at 1 - 2 x (1 - level) lies within `margin` either way on the ratio, 1/(1 +
        margin) to 1 + margin: a difference, if any, smaller than what the margin says matters),
        else DIFFERENT where the report names it (`clear`), else UNKNOWN; on the linear scale (a
        window at 0) the margin is a share of A's centre."""
        tost = self.interval_at(2 * self.level - 1) if self.se is not None else self
        if (
            tost.low is not None
            and tost.high is not None
            and 1 / (1 + margin) - 1 <= tost.low
            and tost.high <= margin
        ):
            return SAME
        return DIFFERENT if self.clear else UNKNOWN

    def tost_span(self) -> str:
        """`-4.0% to +7.1%`: the interval the SAME decision reads (both one-sided tests at its level)."""
        return self.interval_at(2 * self.level - 1).span() if self.se is not None else self.span()

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


def look_alpha(look: int, looks: int) -> float:
    """The level of a close call's `look` of `looks` (lab run --budget: the plan's JVMs are look 0,
    each round of one more JVM the next; `looks` is fixed when the plan's JVMs are done, from the
    budget left and the pace, before any decision): ALPHA where there is one look, else half of it
    at look 0 and the other half split evenly over the rest, so that a run names a false
    difference (or calls two rows the same falsely) in at most ALPHA of runs however its rounds
    end (a union bound over the looks)."""
    if looks <= 1:
        return ALPHA
    return ALPHA / 2 if look == 0 else ALPHA / 2 / (looks - 1)


def adjust(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """One family of comparisons: p values adjusted for their number (Benjamini-Hochberg, scipy's
    `false_discovery_control`), and intervals at 1 - R x ALPHA / m, R of the m named (1 - ALPHA / m
    when none is), so that each interval excludes 0 exactly when its difference is named."""
    tested = [i for i, c in enumerate(comparisons) if c.p is not None]
    out = list(comparisons)
    if len(tested) < 2:  # a family of one: its own test, at `alpha` (a close call's look: look_alpha)
        if alpha == ALPHA:
            return out
        return [
            replace(c, alpha=alpha).interval_at(1 - alpha) if i in tested else c for i, c in enumerate(out)
        ]
    m = len(tested)
    adjusted = stats.false_discovery_control([comparisons[i].p for i in tested], method="bh")
    named = sum(1 for q in adjusted if q < alpha)
    level = 1 - max(named, 1) * alpha / m
    for i, q in zip(tested, adjusted, strict=True):
        out[i] = replace(comparisons[i], p=float(q), family=m, alpha=alpha).interval_at(level)
    return out
