"""confidence.py's tests that no other part's tests reach: the one-sample test of paired ratios."""

from __future__ import annotations

import math

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
