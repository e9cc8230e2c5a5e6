"""What the benchmarks share: the GPU test harness (processes, a scheduler, environments with and
without libnvshare.so, the GPU safety check) and a few helpers.

The harness lives in tests/gpu/harness.py; it is loaded from its file so that the benchmarks do not
depend on how the tests directory is packaged.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def _load_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("xpushare_gpu_harness", REPO / "tests" / "gpu" / "harness.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


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
