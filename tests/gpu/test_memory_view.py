"""The memory view PyTorch gets under libnvshare.so, and the per-process cap.

GPU safety: the cap is tested with NVSHARE_GPU_MEMORY_LIMIT=2GiB and one 3 GiB request, which the
library refuses without asking the driver; nothing here touches more than about 1.3 GiB.
"""

from __future__ import annotations

import shutil

import pytest

from testkit import gpu as harness
from testkit.gpu import GIB, MIB, PROGRAMS, VIRTUAL_CAPACITY, VIRTUAL_CAPACITY_BYTES, python_cmd

# Set explicitly (not the default), so that the test shows the variable is honoured and does not
# depend on what the default is.
CONTEXT_RESERVE = "512MiB"
CONTEXT_RESERVE_BYTES = 512 * MIB


@pytest.mark.timeout(120)
def test_nvshare_run_gives_pytorch_the_virtual_capacity(scheduler: harness.Scheduler) -> None:
    """Through nvshare-run --gpu-memory 16GiB: total is 16 GiB, free is total minus the context
    reserve (NVSHARE_CONTEXT_RESERVE) minus what the process holds, and holding 1 GiB more lowers
    free by exactly that."""
    nvshare_run = shutil.which("nvshare-run")
    assert nvshare_run, "nvshare-run is not installed (pip install --no-build-isolation --no-deps .)"
    argv = [nvshare_run, "--no-start", "--socket", str(scheduler.socket), "--gpu-memory",
            VIRTUAL_CAPACITY, "--", *python_cmd(PROGRAMS / "memory_view.py", "--hold-mib", 1024)]
    shared = harness.run(argv, harness.native_env(NVSHARE_CONTEXT_RESERVE=CONTEXT_RESERVE), timeout=90)
    harness.check_shared(shared, timeout=90)
    view = shared.result
    assert view and view["library_loaded"], shared.describe()
    assert view["total_before"] == view["total_holding"] == VIRTUAL_CAPACITY_BYTES, view
    # PyTorch holds one small block at this point; the context reserve is subtracted on top.
    assert VIRTUAL_CAPACITY_BYTES - CONTEXT_RESERVE_BYTES - 256 * MIB <= view["free_before"], view
    assert view["free_before"] <= VIRTUAL_CAPACITY_BYTES - CONTEXT_RESERVE_BYTES, view
    assert abs((view["free_before"] - view["free_holding"]) - view["hold_bytes"]) <= 2 * MIB, view
    assert shared.pid in {e.pid for e in scheduler.events("grant")}, scheduler.log()


@pytest.mark.timeout(120)
def test_allocating_past_the_limit_raises_out_of_memory(under_library) -> None:
    """With NVSHARE_GPU_MEMORY_LIMIT=2GiB: total reads 2 GiB, 1 GiB fits, 3 GiB more raises
    torch.OutOfMemoryError, and the process keeps working afterwards."""
    shared = harness.run(python_cmd(PROGRAMS / "memory_view.py", "--hold-mib", 1024, "--oversize-mib", 3072),
                         under_library(NVSHARE_GPU_MEMORY_LIMIT="2GiB"), timeout=90)
    harness.check_shared(shared, timeout=90)
    view = shared.result
    assert view and view["library_loaded"], shared.describe()
    assert view["total_before"] == 2 * GIB, view
    assert view["oversize"] == "OutOfMemoryError", view
    assert view["small_after_ok"], view
