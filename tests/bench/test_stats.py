"""bench/core/stats.py: the one convention for medians, percentiles and ratios."""

from __future__ import annotations

import statistics

import pytest

from bench.core import stats


def test_median():
    assert stats.median([]) is None
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.median([None, 5.0, None]) == 5.0
    assert stats.median(x for x in (2.0, 1.0)) == 1.5


def test_percentile_interpolates_linearly():
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == pytest.approx(50.5)
    assert stats.percentile(values, 99) == pytest.approx(99.01)
    assert stats.percentile(values, 100) == 100
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([], 99) is None
    assert stats.percentile([1.0, 3.0], 50) == 2.0
    zero_to_hundred = [float(v) for v in range(101)]
    assert stats.percentile(zero_to_hundred, 99) == pytest.approx(99.0)
    with pytest.raises(ValueError):
        stats.percentile(values, 101)


def test_percentile_is_statistics_quantiles_inclusive():
    values = [3.0, 9.5, 1.0, 4.25, 8.0, 2.0, 7.5]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    assert (stats.percentile(values, 25), stats.percentile(values, 50), stats.percentile(values, 75)) == \
        pytest.approx((q1, q2, q3))


def test_ratio_is_none_without_a_baseline():
    assert stats.ratio(2.0, 4.0) == 0.5
    assert stats.ratio(None, 4.0) is None
    assert stats.ratio(2.0, 0.0) is None
    assert stats.ratio(2.0, None) is None


def test_common_window_counts_only_what_ran_together():
    from bench.core.stats import common_window
    early = [(0.0, 0), (1.0, 100), (2.0, 200), (3.0, 300)]       # 100 a second from 0 to 3
    late = [(0.5, 0), (1.5, 50), (2.5, 100), (3.5, 150)]          # 50 a second from 0.5 to 3.5
    seconds, counts = common_window([early, late])
    assert seconds == pytest.approx(2.5)
    assert counts == [pytest.approx(250), pytest.approx(125)]
    assert common_window([[(0.0, 0), (1.0, 5)], [(2.0, 0), (3.0, 5)]]) == (0.0, [0.0, 0.0])
