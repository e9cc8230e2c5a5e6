"""The memory view through NVML under libnvshare.so: pynvml (or ctypes on libnvidia-ml.so.1) in a
PyTorch process, and nvidia-smi run under the library, report the virtual capacity and the same
free memory as cuMemGetInfo.

GPU safety: nothing here allocates more than PyTorch's first small block.
"""

from __future__ import annotations

import shutil

import pytest

from testkit import gpu as harness
from testkit.gpu import GIB, MIB, PROGRAMS, python_cmd

CAPACITY = "8GiB"
CAPACITY_BYTES = 8 * GIB
RESERVE = 768 * MIB  # NVSHARE_CONTEXT_RESERVE's default


@pytest.mark.timeout(120)
def test_nvml_in_process_agrees_with_cumemgetinfo(nvshare_lib, scheduler) -> None:
    """NVSHARE_GPU_MEMORY=8GiB: both NVML calls report total 8 GiB and exactly cuMemGetInfo's free
    (nothing is allocated between the reads); used = total - free."""
    env = harness.library_env(nvshare_lib, scheduler.socket, gpu_memory=CAPACITY)
    shared = harness.run(python_cmd(PROGRAMS / "nvml_view.py"), env, timeout=90)
    harness.check_shared(shared, timeout=90)
    v = shared.result
    assert v and v["library_loaded"], shared.describe()
    assert v["cuda_total_before"] == v["cuda_total_after"] == CAPACITY_BYTES, v
    assert v["cuda_free_before"] == v["cuda_free_after"], v
    free = v["cuda_free_before"]
    assert CAPACITY_BYTES - RESERVE - 256 * MIB <= free <= CAPACITY_BYTES - RESERVE, v
    assert (v["total1"], v["free1"], v["used1"]) == (CAPACITY_BYTES, free, CAPACITY_BYTES - free), v
    assert "v2_error" not in v, v
    assert (v["total2"], v["free2"], v["used2"]) == (CAPACITY_BYTES, free, CAPACITY_BYTES - free), v
    assert 0 <= v["reserved2"] <= v["used2"], v


@pytest.mark.timeout(120)
def test_nvml_natively_reports_the_card(nvshare_lib) -> None:
    """Control: the same program without the library sees the physical card (more than 8 GiB)."""
    shared = harness.run(python_cmd(PROGRAMS / "nvml_view.py"), harness.native_env(), timeout=90)
    v = shared.check().result
    assert v and not v["library_loaded"], shared.describe()
    assert v["total1"] > CAPACITY_BYTES and v["cuda_total_before"] > CAPACITY_BYTES, v


@pytest.mark.timeout(180)
def test_nvidia_smi_under_the_library_shows_the_container_view(nvshare_lib, scheduler) -> None:
    """nvidia-smi (which never initialises CUDA) under LD_PRELOAD with NVSHARE_GPU_MEMORY=8GiB
    reports 8192 MiB total and the free memory a fresh CUDA process under the same settings gets
    from cuMemGetInfo (that process holds only PyTorch's first block)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not installed")
    env = harness.library_env(nvshare_lib, scheduler.socket, gpu_memory=CAPACITY)
    argv = [smi, f"--id={harness.visible_gpu_index()}",
            "--query-gpu=memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"]
    out = harness.run(argv, env, timeout=60).check()
    total, used, free = (int(x) for x in out.stdout.strip().splitlines()[0].split(","))
    assert total == CAPACITY_BYTES // MIB, out.describe()
    assert free == (CAPACITY_BYTES - RESERVE) // MIB, out.describe()
    assert 0 <= used <= total - free, out.describe()

    native = harness.run(argv, harness.native_env(), timeout=60).check()
    assert int(native.stdout.split(",")[0]) > total, native.describe()

    torch_run = harness.run(python_cmd(PROGRAMS / "nvml_view.py"), env, timeout=90)
    harness.check_shared(torch_run, timeout=90)
    v = torch_run.result
    assert v["cuda_total_before"] // MIB == total, v
    assert abs(v["cuda_free_before"] // MIB - free) <= 64, (v, out.stdout)
