"""What the benchmarks share: the process harness (testkit.gpu: processes, a scheduler, environments
with and without libnvshare.so, the GPU safety check) and a few helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
try:
    import xpushare  # noqa: F401  (only: is it installed?)
except ImportError:  # a checkout without `pip install .`: the package sources are in src/
    sys.path.insert(0, str(REPO / "src"))

from testkit import gpu as harness  # noqa: E402

MIN_FREE_GIB = 48  # GPU safety: nothing starts with less free GPU memory than this (someone else uses it)


def say(prefix: str, message: str) -> None:
    print(f"{prefix}: {message}", flush=True)


def alternating(reps: int) -> list[tuple[int, str]]:
    """(repetition, "native"|"library") in an order that alternates which goes first, so that drift
    (clocks, temperature, caches) does not favour one side."""
    order = []
    for rep in range(reps):
        pair = ("native", "library") if rep % 2 == 0 else ("library", "native")
        order += [(rep, side) for side in pair]
    return order


def gpu_problem(strict: bool = True) -> str | None:
    """Why GPU work must not start now, or None. The benchmarks' rule: MIN_FREE_GIB free on the card
    (stricter than testkit's gpu_headroom_problem(), which is checked too). strict: a GPU whose free
    memory cannot be read (no nvidia-smi) is a problem as well; not strict, it is let through (the
    simulated forms of the benchmarks run without a GPU)."""
    mem = harness.gpu_memory_mib()
    if mem is None:
        return "cannot read the GPU's free memory with nvidia-smi" if strict else None
    free, total = mem
    if free < MIN_FREE_GIB * 1024:
        return (f"only {free} MiB of {total} MiB GPU memory is free (need {MIN_FREE_GIB:g} GiB): "
                "someone else is using the GPU")
    return harness.gpu_headroom_problem()


def require_safe_gpu(strict: bool = True) -> None:
    """The one GPU safety check of the benchmarks, before any GPU work."""
    problem = gpu_problem(strict)
    if problem:
        raise RuntimeError(f"refusing to run: {problem}")


TORCH_PYTHONS = ("/opt/torch/.venv/bin/python3",)  # the GPU machine's PyTorch, when python3 has none


def torch_python(candidates: list[str] | None = None) -> str:
    """The first candidate Python that imports torch (RuntimeError when none does)."""
    if candidates is None:
        candidates = [os.environ.get("BUSY_PYTHON", ""), sys.executable, "python3", *TORCH_PYTHONS]
    tried = []
    for exe in filter(None, dict.fromkeys(candidates)):
        try:
            r = subprocess.run([exe, "-c", "import torch"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            tried.append(exe)
            continue
        if r.returncode == 0:
            return exe
        tried.append(exe)
    raise RuntimeError(f"no Python that imports torch among {', '.join(tried) or 'none'} "
                       "(set BUSY_PYTHON)")
