"""confidence.py's tests that no other part's tests reach: the one-sample test of paired ratios, and the
power of the detectable difference a run states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ktor_lab import confidence


def test_ratios_taken_in_pairs_are_one_difference_tested_against_none():
    """confidence.paired (lab bench's rounds): the geometric mean of the ratios, scipy's one-sample
    t test of their logarithms against 0, and the interval of the difference around it."""
    ratios = [1.21, 1.12, 1.18, 1.25]
    c = confidence.paired(ratios)
    logs = [math.log(x) for x in ratios]
    assert c.difference == pytest.approx(math.exp(sum(logs) / 4) - 1)
    assert c.p == pytest.approx(stats.ttest_1samp(logs, 0).pvalue)
    assert c.low < c.difference < c.high and c.low > 0 and c.clear
    assert not confidence.paired([1.05, 0.96, 1.01, 0.99]).clear
    assert confidence.paired([1.2]) is None and confidence.paired([1.2, 0, None]) is None
    same = confidence.paired([1.1, 1.1, 1.1])
    assert same.p == 0.0 and same.low == same.high == pytest.approx(0.1)


@pytest.mark.parametrize("df", [2, 4, 10, 40])
@pytest.mark.parametrize("family", [1, 10])
def test_the_stated_detectable_difference_is_found_80_percent_of_the_time_at_few_df(df, family):
    """`power_shift` drawn, not read off scipy's noncentral t: a true difference of that many
    standard errors, tested by Student's t on a spread estimated with `df` degrees of freedom at
    0.05 over `family` (Bonferroni), is found in 80% of 200,000 draws (error of the rate: 0.1%),
    where the large-sample sum t(1 - alpha/2) + t(0.8) is found in clearly fewer at few df over
    a family (68% at 2 df, 73% at 4, over 10)."""
    alpha = confidence.ALPHA / family
    crit = stats.t.ppf(1 - alpha / 2, df)
    rng = np.random.default_rng(df * 100 + family)
    n = 200_000
    spread = np.sqrt(rng.chisquare(df, n) / df)  # the estimated standard error, in true ones
    noise = rng.standard_normal(n)

    def found(shift: float) -> float:
        return float(np.mean(np.abs((shift + noise) / spread) > crit))

    assert found(confidence.power_shift(alpha, df)) == pytest.approx(confidence.POWER, abs=0.005)
    if df <= 4 and family > 1:
        assert found(crit + stats.t.ppf(confidence.POWER, df)) < confidence.POWER - 0.05
