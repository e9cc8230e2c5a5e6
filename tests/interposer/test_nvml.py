"""The memory view through NVML: under libnvshare.so, nvmlDeviceGetMemoryInfo and
nvmlDeviceGetMemoryInfo_v2 report what cuMemGetInfo reports (native/src/hooks/nvml.c).

The mock NVML (tests/mock/mock_nvml.c) reports a node-sized GPU: 16 GiB, 3 GiB used of which
512 MiB reserved. nvml_app (tests/mock/nvml_app.c) reaches NVML through the symbols it links
against (--lookup linked) or through dlsym on a dlopen handle (--lookup dlsym, as pynvml does).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from .harness import GIB, MIB

NODE_TOTAL = 16 * GIB
NODE_USED = 3 * GIB
NODE_RESERVED = 512 * MIB
RESERVE = 768 * MIB  # NVSHARE_CONTEXT_RESERVE's default


def run_nvml_app(world, artifacts, *steps, lookup="linked", preload=True, **env):
    e = world.env(**{k: str(v) for k, v in env.items()})
    if not preload:
        e.pop("LD_PRELOAD")
    r = subprocess.run([str(artifacts.nvml_app), "--lookup", lookup, *map(str, steps)], env=e,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"nvml_app failed ({r.returncode})\nstdout: {r.stdout}\nstderr: {r.stderr}"
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return lines


def steps_named(lines, name):
    return [line for line in lines if line["step"] == name]


def assert_view(nv, total, free):
    """Both NVML calls report total/free; used = total - free; v2's reserved stays within used."""
    assert nv["ret1"] == 0 and nv["ret2"] == 0, nv
    assert (nv["total1"], nv["free1"], nv["used1"]) == (total, free, total - free), nv
    assert (nv["total2"], nv["free2"], nv["used2"]) == (total, free, total - free), nv
    assert nv["reserved2"] == min(NODE_RESERVED, total - free), nv


@pytest.fixture
def sched(world):
    return world.scheduler(mode="off")


@pytest.mark.parametrize("lookup", ["linked", "dlsym"])
def test_nvml_reports_what_cumemgetinfo_reports(world, artifacts, sched, lookup):
    """NVSHARE_GPU_MEMORY=4GiB on a 16 GiB node: both NVML calls, reached through linked symbols
    and through dlsym, give cuMemGetInfo's total and free, before and after a 1 GiB allocation."""
    lines = run_nvml_app(world, artifacts, "ctx", 0, "meminfo", "nvml", 0, "alloc", "1G", "meminfo",
                         "nvml", 0, lookup=lookup, NVSHARE_GPU_MEMORY="4GiB")
    cu = steps_named(lines, "meminfo")
    nv = steps_named(lines, "nvml")
    assert [c["total"] for c in cu] == [4 * GIB, 4 * GIB], cu
    assert cu[0]["free"] - cu[1]["free"] == GIB, cu
    for c, n in zip(cu, nv):
        assert n["lib1"] == n["lib2"] == "libnvshare.so", n
        assert_view(n, c["total"], c["free"])


def test_nvml_uses_the_scheduler_capacity(world, artifacts):
    """The scheduler's ATTACHED capacity (6 GiB) lowers the NVML view as it lowers cuMemGetInfo's."""
    world.scheduler(mode="off", extra_args=["--gpu-memory", "6G"])
    lines = run_nvml_app(world, artifacts, "ctx", 0, "meminfo", "nvml", 0, lookup="dlsym")
    (cu,), (nv,) = steps_named(lines, "meminfo"), steps_named(lines, "nvml")
    assert cu["total"] == 6 * GIB, cu
    assert_view(nv, 6 * GIB, cu["free"])


def test_nvml_maps_devices_by_uuid(world, artifacts, sched):
    """NVML numbers the node's GPUs, CUDA the visible ones: with CUDA_VISIBLE_DEVICES=1, CUDA device
    0 is NVML device 1. Only that device shows the process's 1 GiB."""
    lines = run_nvml_app(world, artifacts, "ctx", 0, "alloc", "1G", "meminfo", "nvml", 0, "nvml", 1,
                         NVSHARE_GPU_MEMORY="4GiB", MOCK_CUDA_DEVICES=2, CUDA_VISIBLE_DEVICES=1)
    (cu,) = steps_named(lines, "meminfo")
    other, mine = steps_named(lines, "nvml")
    assert cu["free"] == 4 * GIB - GIB - RESERVE, cu
    assert_view(mine, 4 * GIB, cu["free"])
    assert_view(other, 4 * GIB, 4 * GIB - RESERVE)


def test_nvml_without_cuda_uses_the_environment(world, artifacts, sched):
    """A process that never initialises CUDA (nvidia-smi): the capacity from NVSHARE_GPU_MEMORY, or
    NVSHARE_GPU_MEMORY_LIMIT when set, with nothing held (what a fresh context would see)."""
    (nv,) = run_nvml_app(world, artifacts, "nvml", 0, NVSHARE_GPU_MEMORY="4GiB")
    assert_view(nv, 4 * GIB, 4 * GIB - RESERVE)
    (nv,) = run_nvml_app(world, artifacts, "nvml", 0, lookup="dlsym", NVSHARE_GPU_MEMORY="4GiB",
                         NVSHARE_GPU_MEMORY_LIMIT="2GiB", NVSHARE_CONTEXT_RESERVE="256MiB")
    assert_view(nv, 2 * GIB, 2 * GIB - 256 * MIB)
    # a capacity smaller than the reserve: free is 0, never negative, never above total
    (nv,) = run_nvml_app(world, artifacts, "nvml", 0, NVSHARE_GPU_MEMORY="512MiB")
    assert_view(nv, 512 * MIB, 0)


def test_nvml_passes_the_real_answer_when_nothing_is_known(world, artifacts, sched):
    """No CUDA device and no capacity in the environment: the node's numbers, unchanged."""
    (nv,) = run_nvml_app(world, artifacts, "nvml", 0)
    assert (nv["total1"], nv["used1"], nv["free1"]) == (NODE_TOTAL, NODE_USED, NODE_TOTAL - NODE_USED), nv
    assert (nv["total2"], nv["reserved2"], nv["used2"]) == (NODE_TOTAL, NODE_RESERVED, NODE_USED), nv
    # natively (no library): the same numbers, from the mock itself
    (native,) = run_nvml_app(world, artifacts, "nvml", 0, preload=False)
    assert native["lib1"] == native["lib2"] == "libnvidia-ml.so.1", native
    assert {k: v for k, v in native.items() if not k.startswith("lib")} == \
        {k: v for k, v in nv.items() if not k.startswith("lib")}


def test_nvml_without_uuid_falls_back(world, artifacts, sched):
    """nvmlDeviceGetUUID fails: the device cannot be matched to CUDA's; the environment's capacity
    still applies, and without one the real answer passes through."""
    lines = run_nvml_app(world, artifacts, "ctx", 0, "nvml", 0, MOCK_NVML_NO_UUID=1)
    (nv,) = steps_named(lines, "nvml")
    assert (nv["ret1"], nv["total1"], nv["free1"]) == (0, NODE_TOTAL, NODE_TOTAL - NODE_USED), nv
    lines = run_nvml_app(world, artifacts, "ctx", 0, "alloc", "1G", "nvml", 0, MOCK_NVML_NO_UUID=1,
                         NVSHARE_GPU_MEMORY="4GiB")
    (nv,) = steps_named(lines, "nvml")
    assert_view(nv, 4 * GIB, 4 * GIB - RESERVE)


def test_nvml_errors_pass_through(world, artifacts, sched):
    """A v2 struct with the wrong version gets NVML's own error (ARGUMENT_VERSION_MISMATCH, 25)."""
    lines = run_nvml_app(world, artifacts, "ctx", 0, "nvml-badversion", 0, NVSHARE_GPU_MEMORY="4GiB")
    assert steps_named(lines, "nvml-badversion")[0]["ret"] == 25, lines


PYNVML_LIKE = textwrap.dedent("""
    import ctypes, json
    class Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
    class MemV2(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                    ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    ptr = ctypes.c_ulonglong()
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    m1, m2 = Mem(), MemV2()
    m2.version = ctypes.sizeof(MemV2) | (2 << 24)
    r1 = nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(m1))
    r2 = nvml.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(m2))
    print(json.dumps({"cu_free": free.value, "cu_total": total.value, "ret1": r1, "total1": m1.total,
                      "free1": m1.free, "used1": m1.used, "ret2": r2, "total2": m2.total,
                      "reserved2": m2.reserved, "free2": m2.free, "used2": m2.used}))
""")


def test_python_ctypes_sees_the_container_view(world, artifacts, sched):
    """As pynvml does it (ctypes: CDLL, then dlsym by name): NVML's total and free equal
    cuMemGetInfo's under NVSHARE_GPU_MEMORY=4GiB, a 1 GiB allocation included."""
    env = world.env(NVSHARE_GPU_MEMORY="4GiB")
    r = subprocess.run([sys.executable, "-c", PYNVML_LIKE], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    nv = json.loads(r.stdout.strip().splitlines()[-1])
    assert nv["cu_total"] == 4 * GIB and nv["cu_free"] == 3 * GIB - RESERVE, nv
    assert_view(nv, nv["cu_total"], nv["cu_free"])


def test_library_exports_exactly_the_nvml_table(world):
    """The linker map exports the NVML table's two wrappers (and no other nvml* symbol)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(world.library)], capture_output=True,
                         text=True, check=True).stdout
    names = sorted(line.split()[-1].split("@")[0] for line in out.splitlines() if " nvml" in line)
    assert names == ["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"], names
