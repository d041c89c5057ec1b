"""A figure as a distribution over windows, and a difference named only when the windows say so.

A row of `lab run` is several measured windows (interleaved across the cases, A B C A B C), not a
number: each figure is their mean with its 95% interval (Student's t over the windows, as pyperf
and benchstat give one beside each centre). Two rows differ on a figure only when both hold:

- a test over the windows says so: Mann-Whitney U, two-sided, p < ALPHA (no assumption of normal
  windows; with 5 windows a side its smallest p is 0.008). Where one row is held against several
  (the best of a figure against every other, `adjust`), the p values are adjusted for their number
  (Benjamini-Hochberg): unadjusted, the best of 5 rows drawn from one distribution (5 windows each,
  within 5%) was named ahead of another in 16% of 400 draws, of 10 rows in about half; adjusted, in
  5% (`runner/tests/unit/test_conclusions.py`). Holm's stricter control would name nothing among 10
  rows with 5 windows (its smallest p, 9 x 0.008, is above 0.05);
- the difference is larger than the noise floor measured in the same run: what two proxies of the
  same case (an A/A pair) differ by, never less than MIN_DIFFERENCE. Windows of one JVM do not
  sample what differs between JVMs (JIT decisions, memory layout); the A/A pair does.

Otherwise the rows are indistinguishable, and the report says within how many percent.
The statistics are scipy's; nothing here is a hand-written test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05
# Below this, a difference is never called one, whatever the test: the lab's own edges (a window's
# first and last requests, a scrape) move figures by about this much.
MIN_DIFFERENCE = 0.01


@dataclass(frozen=True)
class Estimate:
    """The windows of one figure of one row: their number, mean and 95% interval of the mean,
    median and range. None throughout when no window measured it."""

    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    median: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    values: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Estimate:
        known = tuple(float(v) for v in values if v is not None and not math.isnan(v))
        if not known:
            return cls(0)
        a = np.array(known)
        mean = float(a.mean())
        low = high = None
        if len(a) >= 2:
            sem = float(stats.sem(a))
            if sem == 0:
                low = high = mean
            else:
                low, high = (float(x) for x in stats.t.interval(CONFIDENCE, len(a) - 1, loc=mean, scale=sem))
        return cls(len(a), mean, low, high, float(np.median(a)), float(a.min()), float(a.max()), known)

    @property
    def half_width(self) -> float | None:
        """Half the 95% interval, as a share of the mean (benchstat's `±3%`); None with one window."""
        if self.mean is None or self.low is None or self.high is None or self.mean == 0:
            return None
        return (self.high - self.low) / 2 / abs(self.mean)


@dataclass(frozen=True)
class Comparison:
    """Row B against row A on one figure."""

    a: Estimate
    b: Estimate
    p: float | None  # Mann-Whitney U, two-sided (adjusted when `family` > 1); None: under 2 windows a side
    difference: float | None  # (B - A) / A, of the means
    floor: float  # the noise floor it was judged against (a share)
    family: int = 1  # how many comparisons its p was adjusted over (Benjamini-Hochberg)

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA

    @property
    def can_tell(self) -> bool:
        """Whether these windows could give p < ALPHA at all (3 and 3 cannot: see smallest_p)."""
        return smallest_p(self.a.n, self.b.n) < ALPHA

    @property
    def beyond_floor(self) -> bool:
        return self.difference is not None and abs(self.difference) > self.floor

    @property
    def clear(self) -> bool:
        """A difference the report may name: the test and the floor both say so."""
        return self.significant and self.beyond_floor

    def words(self) -> str:
        """`+4.2%, p=0.008`, `+1.3%, p=0.55, not significant`, or `+700.0%, not tested (one window)`."""
        if self.difference is None:
            return "not measured"
        if self.p is None:
            return f"{self.difference:+.1%}, not tested (one window)"
        text = f"{self.difference:+.1%}, p={self.p:.2g}"
        if self.family > 1:
            text += f" of {self.family}"
        if not self.significant and not self.can_tell:
            return text + f", too few windows to tell ({self.a.n} and {self.b.n})"
        if not self.significant:
            return text + ", not significant"
        if not self.beyond_floor:
            return text + f", under the noise floor of {self.floor:.1%}"
        return text


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p Mann-Whitney U can give with these many windows a side (every
    window of one side above every one of the other): 2 / C(n_a + n_b, n_a). With 3 and 3 it is
    0.1, so no difference can be named; with 4 and 4, 0.029; with 5 and 5, 0.008."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


# Measured windows per row by default, in `lab run` and in every study made of windows: enough for
# the test over them (Mann-Whitney U's smallest p with 5 a side is 0.008; with 3, 0.1: never a change).
WINDOWS = 5


def fewest_windows() -> int:
    """The fewest windows a side with which the test can reach ALPHA."""
    return next(n for n in range(2, 100) if smallest_p(n, n) < ALPHA)


def too_few_windows(n: int) -> str | None:
    """Why `n` windows a row (2 or more) can name no difference, and how many can; None when they can."""
    if 1 < n < (fewest := fewest_windows()):
        return (
            f"with {n} windows a row no difference can be named (the test's smallest p is "
            f"{smallest_p(n, n):.2g}); give --windows {fewest} or more"
        )
    return None


def compare(a: Estimate, b: Estimate, floor: float = MIN_DIFFERENCE) -> Comparison:
    """B against A: the test over their windows and the relative difference of their means."""
    p = None
    if a.n >= 2 and b.n >= 2:
        if set(a.values) == set(b.values) and len(set(a.values)) == 1:
            p = 1.0  # identical constant windows: scipy's test is undefined there
        else:
            p = float(stats.mannwhitneyu(a.values, b.values, alternative="two-sided").pvalue)
    difference = None
    if a.mean is not None and b.mean is not None and a.mean != 0:
        difference = (b.mean - a.mean) / abs(a.mean)
    return Comparison(a, b, p, difference, max(floor, MIN_DIFFERENCE))


def adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons of one row against several others, their p values adjusted for how many
    they are (Benjamini-Hochberg, scipy's `false_discovery_control`); those without a p as they are."""
    tested = [i for i, c in enumerate(comparisons) if c.p is not None]
    out = list(comparisons)
    if len(tested) < 2:
        return out
    adjusted = stats.false_discovery_control([comparisons[i].p for i in tested], method="bh")
    for i, q in zip(tested, adjusted, strict=True):
        out[i] = replace(comparisons[i], p=float(q), family=len(tested))
    return out


def noise_floor(pairs: Sequence[Comparison]) -> float:
    """The largest difference the A/A pairs of a run showed on a figure (at least MIN_DIFFERENCE)."""
    seen = [abs(c.difference) for c in pairs if c.difference is not None]
    return max([MIN_DIFFERENCE, *seen])
