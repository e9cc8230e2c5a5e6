"""What the benchmarks share: the process harness (testkit.gpu: processes, a scheduler, environments
with and without libnvshare.so, the GPU safety check) and a few helpers."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from testkit import gpu as harness  # noqa: E402


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(ours: float, baseline: float) -> float:
    return ours / baseline if baseline else float("nan")


def alternating(reps: int) -> list[tuple[int, str]]:
    """(repetition, "native"|"library") in an order that alternates which goes first, so that drift
    (clocks, temperature, caches) does not favour one side."""
    order = []
    for rep in range(reps):
        pair = ("native", "library") if rep % 2 == 0 else ("library", "native")
        order += [(rep, side) for side in pair]
    return order


def require_safe_gpu() -> None:
    problem = harness.gpu_headroom_problem()
    if problem:
        raise SystemExit(f"refusing to run: {problem}")
