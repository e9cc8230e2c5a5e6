"""Real frameworks under libnvshare.so give the results they give natively.

Every run here goes through a scheduler (mode off) and must show up in its log as granted: proof that
the library really intercepted the program's GPU work, so a pass is never a library that did nothing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from testkit import gpu as harness
from testkit.gpu import EXAMPLES, PROGRAMS, VIRTUAL_CAPACITY_BYTES, python_cmd


def require_module(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"needs {name}")


def assert_granted(scheduler: harness.Scheduler, run: harness.Run) -> None:
    granted = {e.pid for e in scheduler.events("grant")}
    assert run.pid in granted, (f"pid {run.pid} never got the GPU lock: the library did not gate its "
                                f"work\n--- scheduler log ---\n{scheduler.log()}")


@pytest.mark.timeout(300)
def test_pytorch_training_is_bit_identical_with_and_without_the_library(tmp_path: Path, scheduler,
                                                                         under_library) -> None:
    """Same losses at every step and the same final parameters, bit for bit.

    Bit-identical, not "close", because the library changes where memory lives (managed instead of
    device memory) and when work may be submitted, never which kernels run on which data: with
    deterministic algorithms (cuDNN deterministic, fixed cuBLAS workspace, no TF32) a native run and a
    run under the library execute the same kernels on the same bytes. Any difference means the library
    altered data (a copy, a memset, an allocation aliasing live memory) or the program's choices.
    """
    args = ["--steps", "120", "--seed", "3"]
    native_json, shared_json = tmp_path / "native.json", tmp_path / "shared.json"
    harness.run(python_cmd(EXAMPLES / "pytorch_train.py", *args, "--json-out", native_json),
                harness.native_env(), timeout=120).check()
    shared = harness.run(python_cmd(EXAMPLES / "pytorch_train.py", *args, "--json-out", shared_json),
                         under_library(), timeout=120)
    harness.check_shared(shared, timeout=120)
    native, ours = json.loads(native_json.read_text()), json.loads(shared_json.read_text())

    assert native["device"] == ours["device"] == "cuda"
    assert ours["memory"]["total"] == VIRTUAL_CAPACITY_BYTES, "the library's memory view is not active"
    assert_granted(scheduler, shared)
    assert len(ours["losses"]) == len(native["losses"]) == 120
    pairs = zip(native["losses"], ours["losses"], strict=True)
    first_diff = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    assert first_diff is None, (f"losses differ from step {first_diff}: native "
                                f"{native['losses'][first_diff]!r}, under the library "
                                f"{ours['losses'][first_diff]!r}")
    assert ours["param_sha256"] == native["param_sha256"], (native["param_sum"], ours["param_sum"])
    # The job really learned something (so equal losses are not equal garbage).
    assert sum(ours["losses"][-10:]) < 0.5 * sum(ours["losses"][:10])


@pytest.mark.timeout(240)
def test_cupy_results_are_correct_under_the_library(tmp_path: Path, scheduler, under_library) -> None:
    require_module("cupy")
    out = tmp_path / "cupy.json"
    shared = harness.run(python_cmd(EXAMPLES / "cupy_script.py", "--json-out", out),
                         under_library(CUPY_CACHE_DIR=tmp_path / "cupy-cache"), timeout=180)
    harness.check_shared(shared, timeout=180)
    report = json.loads(out.read_text())
    assert report["passed"] == report["total"] == len(report["checks"]) > 0, report["checks"]
    assert report["memory"]["total"] == VIRTUAL_CAPACITY_BYTES
    assert_granted(scheduler, shared)


@pytest.mark.timeout(240)
def test_triton_kernels_are_correct_under_the_library(tmp_path: Path, scheduler, under_library) -> None:
    require_module("triton")
    # A fresh cache: the kernels are compiled (ptxas runs as a child, preloaded too) under the library.
    shared = harness.run(python_cmd(PROGRAMS / "triton_kernels.py"),
                         under_library(TRITON_CACHE_DIR=tmp_path / "triton-cache"), timeout=180)
    harness.check_shared(shared, timeout=180)
    result = shared.result
    assert result and result["library_loaded"], shared.describe()
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert result["memory_total"] == VIRTUAL_CAPACITY_BYTES
    assert_granted(scheduler, shared)


@pytest.mark.timeout(240)
def test_jax_with_the_platform_allocator_is_correct_under_the_library(tmp_path: Path, scheduler,
                                                                     under_library) -> None:
    require_module("jax")
    out = tmp_path / "jax.json"
    shared = harness.run(python_cmd(EXAMPLES / "jax_script.py", "--json-out", out),
                         under_library(XLA_PYTHON_CLIENT_ALLOCATOR="platform",
                                       XLA_PYTHON_CLIENT_PREALLOCATE="false"), timeout=180)
    harness.check_shared(shared, timeout=180)
    report = json.loads(out.read_text())
    assert report["platform"] == "gpu", f"JAX ran on {report['platform']}: no CUDA backend installed?"
    assert report["allocator"] == "platform"
    assert report["passed"] == report["total"] > 0, report["checks"]
    assert_granted(scheduler, shared)
