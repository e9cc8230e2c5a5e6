"""The statistics of every benchmark, with one convention.

- median(values): the middle value (the mean of the two middle ones for an even count); values that
  are None are left out; None when nothing is left.
- percentile(values, q): q from 0 to 100, linear interpolation between the closest ranks (numpy's
  default, statistics.quantiles(method="inclusive")); None values left out; None when nothing is left.
- ratio(ours, baseline): ours / baseline; None when either is missing or the baseline is zero.
- common_window(series): processes that ran at once, each a list of (time, cumulative count)
  samples: the span all of them ran, and each one's count within it (linear between samples).

This module is also imported by the GPU child programs (bench/launch/train_steps.py): stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def _present(values: Iterable[float | None]) -> list[float]:
    return sorted(v for v in values if v is not None)


def median(values: Iterable[float | None]) -> float | None:
    data = _present(values)
    if not data:
        return None
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    data = _present(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def ratio(ours: float | None, baseline: float | None) -> float | None:
    if ours is None or not baseline:
        return None
    return ours / baseline


def _count_at(samples: list[tuple[float, float]], t: float) -> float:
    """A cumulative count at time t, linear between the samples around it."""
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return samples[-1][1] if t > samples[-1][0] else samples[0][1]


def common_window(series: list[list[tuple[float, float]]]) -> tuple[float, list[float]]:
    """(seconds all of them ran, each one's count in those seconds) for processes that each
    sampled (time, cumulative count) from their start to their end: two processes started a few
    tenths of a second apart are compared only over the time they really ran together."""
    start = max(s[0][0] for s in series)
    end = min(s[-1][0] for s in series)
    if end <= start:
        return 0.0, [0.0] * len(series)
    return end - start, [_count_at(s, end) - _count_at(s, start) for s in series]
