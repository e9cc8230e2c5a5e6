"""The statistics of every benchmark, with one convention.

- median(values): the middle value (the mean of the two middle ones for an even count); values that
  are None are left out; None when nothing is left.
- percentile(values, q): q from 0 to 100, linear interpolation between the closest ranks (numpy's
  default, statistics.quantiles(method="inclusive")); None values left out; None when nothing is left.
- ratio(ours, baseline): ours / baseline; None when either is missing or the baseline is zero.

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
