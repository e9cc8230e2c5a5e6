"""Real frameworks under libnvshare.so give the results they give natively.

Every run here goes through a scheduler (mode off) and must show up in its log as granted: proof that
the library really intercepted the program's GPU work, so a pass is never a library that did nothing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
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


def train_both_ways(tmp_path: Path, under_library, **env: object) -> tuple[dict, dict, harness.Run]:
    """examples/pytorch_train.py natively and under the library, with the same extra environment:
    (native result, result under the library, the run under the library)."""
    args = ["--steps", "120", "--seed", "3"]
    native_json, shared_json = tmp_path / "native.json", tmp_path / "shared.json"
    native_env = harness.native_env(**env)
    harness.run(python_cmd(EXAMPLES / "pytorch_train.py", *args, "--json-out", native_json),
                native_env, timeout=120).check()
    shared = harness.run(python_cmd(EXAMPLES / "pytorch_train.py", *args, "--json-out", shared_json),
                         under_library(**env), timeout=120)
    harness.check_shared(shared, timeout=120, native_environment=native_env)
    return json.loads(native_json.read_text()), json.loads(shared_json.read_text()), shared


def assert_same_training(native: dict, ours: dict) -> None:
    assert native["device"] == ours["device"] == "cuda"
    assert ours["memory"]["total"] == VIRTUAL_CAPACITY_BYTES, "the library's memory view is not active"
    assert len(ours["losses"]) == len(native["losses"]) == 120
    pairs = zip(native["losses"], ours["losses"], strict=True)
    first_diff = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    assert first_diff is None, (f"losses differ from step {first_diff}: native "
                                f"{native['losses'][first_diff]!r}, under the library "
                                f"{ours['losses'][first_diff]!r}")
    assert ours["param_sha256"] == native["param_sha256"], (native["param_sum"], ours["param_sum"])
    # The job really learned something (so equal losses are not equal garbage).
    assert sum(ours["losses"][-10:]) < 0.5 * sum(ours["losses"][:10])


@pytest.mark.timeout(300)
def test_pytorch_training_is_bit_identical_with_and_without_the_library(tmp_path: Path, scheduler,
                                                                         under_library) -> None:
    """Same losses at every step and the same final parameters, bit for bit.

    Bit-identical, not "close", because the library changes where memory lives (device memory it
    maps itself instead of cudaMalloc's) and when work may be submitted, never which kernels run on
    which data: with deterministic algorithms (cuDNN deterministic, fixed cuBLAS workspace, no TF32)
    a native run and a run under the library execute the same kernels on the same bytes. Any
    difference means the library altered data (a copy, a memset, an allocation aliasing live
    memory) or the program's choices.
    """
    native, ours, shared = train_both_ways(tmp_path, under_library)
    assert ours["memory"]["expandable_segments"] == 0, ours["memory"]
    assert_same_training(native, ours)
    assert_granted(scheduler, shared)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("conf, backend, expandable", [
    # PyTorch maps its own segments (cuMemCreate, cuMemMap): the program's own VMM memory, which
    # the library counts against the capacity and leaves where it is
    ("expandable_segments:True", "native", True),
    # the driver's stream-ordered pools (cuMemAllocAsync), which the library converts
    ("backend:cudaMallocAsync", "cudaMallocAsync", False),
])
def test_pytorch_on_its_other_allocators_is_bit_identical_under_the_library(tmp_path: Path, scheduler,
                                                                           under_library, conf, backend,
                                                                           expandable) -> None:
    native, ours, shared = train_both_ways(tmp_path, under_library, PYTORCH_CUDA_ALLOC_CONF=conf)
    for run in (native, ours):  # the setting reached PyTorch, natively and under the library
        assert run["memory"]["allocator_backend"] == backend, run["memory"]
        assert (run["memory"]["expandable_segments"] > 0) == expandable, run["memory"]
    assert_same_training(native, ours)
    assert_granted(scheduler, shared)


@pytest.mark.timeout(300)
def test_nccl_on_one_gpu_trains_bit_identically_under_the_library(tmp_path: Path, scheduler,
                                                                  under_library) -> None:
    """A one-rank DistributedDataParallel job on the NCCL backend (its communicator, its buffers and
    its all-reduce kernels; NCCL refuses two ranks on one GPU, so two GPUs are the gang benchmark's)."""
    args = ["--nproc-per-node", "1", "--standalone", str(EXAMPLES / "ddp_train.py"), "--backend", "nccl",
            "--steps", "60", "--width", "256", "--batch-size", "64", "--seed", "5"]
    native_json, shared_json = tmp_path / "native.json", tmp_path / "shared.json"
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    harness.run([*torchrun, *args, "--json-out", str(native_json)], harness.native_env(),
                timeout=180).check()
    shared = harness.run([*torchrun, *args, "--json-out", str(shared_json)], under_library(), timeout=180)
    harness.check_shared(shared, timeout=180)
    native, ours = json.loads(native_json.read_text()), json.loads(shared_json.read_text())
    assert native["backend"] == ours["backend"] == "nccl" and ours["world_size"] == 1
    assert ours["losses"] == native["losses"], "losses differ under the library"
    assert ours["params_sha256"] == native["params_sha256"]
    # the rank, a child of the launcher (which is under the library too but runs no CUDA)
    ranks = {e.pid for e in scheduler.events("grant")} - {shared.pid}
    assert ranks, f"the rank never got the GPU lock\n{scheduler.log()}"


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
    harness.check_shared(shared, timeout=180, native_environment=harness.native_env(
        XLA_PYTHON_CLIENT_ALLOCATOR="platform", XLA_PYTHON_CLIENT_PREALLOCATE="false"))
    report = json.loads(out.read_text())
    assert report["platform"] == "gpu", f"JAX ran on {report['platform']}: no CUDA backend installed?"
    assert report["allocator"] == "platform"
    assert report["passed"] == report["total"] > 0, report["checks"]
    assert_granted(scheduler, shared)


JAX_SETTINGS = ("XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_CLIENT_MEM_FRACTION",
                "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_FLAGS")


def jax_default_allocator(env: dict[str, str], fraction: float) -> dict[str, str]:
    """env with JAX on its default allocator (BFC, preallocating `fraction` of the memory it is
    shown) and without autotuning, which times candidate kernels and may pick others from run to
    run. The fraction under its older name, which every JAX reads (newer ones after the new name,
    XLA_CLIENT_MEM_FRACTION, and they refuse both set: their GPU plugin then fails and JAX runs on
    the CPU)."""
    env = {k: v for k, v in env.items() if k not in JAX_SETTINGS}
    return {**env, "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.4f}", "XLA_FLAGS": "--xla_gpu_autotune_level=0"}


@pytest.mark.timeout(300)
def test_jax_with_its_default_allocator_is_bit_identical_under_the_library(tmp_path: Path, scheduler,
                                                                          under_library) -> None:
    """JAX preallocating its pool (2 GiB here: of the card natively, of the virtual capacity under
    the library) gives the same bytes as natively."""
    require_module("jax")
    memory = harness.gpu_memory_mib()
    assert memory, "nvidia-smi did not say the GPU's memory"
    pool_mib = 2048
    native_env = jax_default_allocator(harness.native_env(), pool_mib / memory[1])
    shared_env = jax_default_allocator(under_library(), pool_mib / (VIRTUAL_CAPACITY_BYTES >> 20))

    def run(env: dict[str, str], name: str) -> tuple[harness.Run, dict]:
        out = tmp_path / f"{name}.json"
        done = harness.run(python_cmd(EXAMPLES / "jax_script.py", "--json-out", out), env, timeout=180)
        return done, (json.loads(out.read_text()) if out.exists() else {})

    native_run, native = run(native_env, "native")
    native_run.check()
    assert native["platform"] == "gpu", f"JAX ran on {native['platform']} natively: no CUDA backend?"
    shared, ours = run(shared_env, "shared")
    harness.check_shared(shared, timeout=180, native_environment=native_env)
    assert ours["platform"] == "gpu" and ours["allocator"] == "default", ours
    for report in (native, ours):  # the fraction reached JAX: a pool of about 2 GiB, not 75% of the GPU
        assert abs(report["pool_bytes"] - (pool_mib << 20)) < (pool_mib << 20) // 10, report["pool_bytes"]
    assert ours["passed"] == ours["total"] > 0, ours["checks"]
    assert_granted(scheduler, shared)
    differ = [n["name"] for n, o in zip(native["checks"], ours["checks"], strict=True) if n["sha256"] != o["sha256"]]
    if differ:  # say whether JAX itself repeats its bytes here, natively
        again = run(native_env, "native-again")[1]
        natively = [n["name"] for n, a in zip(native["checks"], again["checks"], strict=True)
                    if n["sha256"] != a["sha256"]]
        pytest.fail(f"results differ under the library: {differ}; two native runs differ in: {natively or 'none'}")
