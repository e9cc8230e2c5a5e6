"""Allocation conversion, frees, accounting, caps and the memory view of libnvshare.so.

The mock driver logs every allocation with its kind, so each test checks what the interposer
actually asked the driver for, not only what the application saw.
"""

import pytest

from .harness import GIB, MIB, poll

OOM = 2
INVALID_VALUE = 1


@pytest.fixture
def sched(world):
    # mode off: nothing here waits for a lock
    return world.scheduler(mode="off")


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_mem_alloc_becomes_managed_and_frees_with_mem_free(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "1M", "verify", "free", "last")
    alloc = app.wait_step("alloc")
    assert alloc["ret"] == 0
    assert app.wait_step("verify")["ok"] == 1, "copies through the converted pointer must round-trip"
    assert app.wait_step("free")["ret"] == 0

    log = world.log
    assert log.entries(app.pid, "cuMemAlloc_v2") == [], "cuMemAlloc_v2 must not reach the driver"
    managed = log.entries(app.pid, "cuMemAllocManaged")
    assert [(e["ptr"], e["size"], e["flags"], e["ret"]) for e in managed] == \
        [(alloc["ptr"], MIB, 1, 0)], "one cuMemAllocManaged(..., CU_MEM_ATTACH_GLOBAL) of the same size"
    frees = log.entries(app.pid, "cuMemFree_v2")
    assert [(e["ptr"], e["kind"], e["ret"]) for e in frees] == [(alloc["ptr"], "managed", 0)]
    assert log.errors(app.pid) == []


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
@pytest.mark.parametrize("align_env, align", [(None, 32), ("256", 256), ("0", 512)],
                         ids=["attr32", "attr256", "unknown->512"])
def test_pitch_allocation_keeps_pitch_semantics(world, sched, align_env, align):
    width, height = 1000, 7
    app = world.run("init", "ctx", 0, "allocpitch", width, height, 4, "allocpitch", 64, 3, 16,
                    env={"MOCK_CUDA_PITCH_ALIGN": align_env})
    first, second = app.steps("allocpitch")
    for step, w, h in ((first, width, height), (second, 64, 3)):
        assert step["ret"] == 0
        expected_pitch = -(-w // align) * align
        assert step["pitch"] == expected_pitch, f"pitch of width {w} rounded up to {align}"
        assert step["size"] == expected_pitch * h
    assert world.log.entries(app.pid, "cuMemAllocPitch_v2") == []
    managed = world.log.entries(app.pid, "cuMemAllocManaged")
    assert [(e["ptr"], e["size"], e["flags"]) for e in managed] == \
        [(first["ptr"], first["size"], 1), (second["ptr"], second["size"], 1)]


def test_pitch_allocation_rejects_bad_element_size(world, sched):
    app = world.run("init", "ctx", 0, "allocpitch", 100, 2, 3)
    assert app.wait_step("allocpitch")["ret"] == INVALID_VALUE
    assert world.log.entries(app.pid, "cuMemAllocManaged") == []


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
@pytest.mark.parametrize("lookup, ptds", [("linked", False), ("gpa2", True)], ids=["legacy", "ptsz"])
def test_async_and_pool_allocations_become_managed(world, sched, lookup, ptds):
    app = world.run("init", "ctx", 0, "stream", "allocasync", "1M", "allocpool", "2M", "verify",
                    lookup=lookup, ptds=ptds)
    a, p = app.wait_step("allocasync"), app.wait_step("allocpool")
    assert a["ret"] == 0 and p["ret"] == 0
    assert app.wait_step("verify")["ok"] == 1
    fns = world.log.fns(app.pid)
    assert not [f for f in fns if f.startswith(("cuMemAllocAsync", "cuMemAllocFromPoolAsync"))], fns
    managed = world.log.entries(app.pid, "cuMemAllocManaged")
    assert [(e["ptr"], e["size"], e["flags"]) for e in managed] == \
        [(a["ptr"], MIB, 1), (p["ptr"], 2 * MIB, 1)]


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_async_allocation_during_capture_passes_through(world, sched):
    app = world.run("init", "ctx", 0, "stream", "capture-begin", "thread", "allocasync", "1M",
                    "freeasync", "last", "capture-end", "allocasync", "1M")
    captured, after = app.steps("allocasync")
    assert captured["ret"] == 0 and after["ret"] == 0
    assert app.wait_step("freeasync")["ret"] == 0
    assert app.wait_step("capture-end")["ret"] == 0, "the capture must survive"
    (alloc,) = world.log.entries(app.pid, "cuMemAllocAsync")
    assert alloc["kind"] == "async" and alloc.get("captured") == 1 and alloc["ptr"] == captured["ptr"]
    (free,) = world.log.entries(app.pid, "cuMemFreeAsync")
    assert free["ptr"] == alloc["ptr"] and free["ret"] == 0
    # outside the capture the same call is converted
    assert [e["ptr"] for e in world.log.entries(app.pid, "cuMemAllocManaged")] == [after["ptr"]]


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_free_async_of_converted_pointer_is_deferred_to_mem_free(world, sched):
    app = world.app("init", "ctx", 0, "stream", "allocasync", "1M", "launch", 2, "freeasync", "last",
                    "streamsync", "alloc", "4K", "pause")
    app.paused()
    ptr = app.wait_step("allocasync")["ptr"]
    assert app.wait_step("freeasync")["ret"] == 0
    stream = app.wait_step("stream")["stream"]
    log = world.log
    # reaped on the next allocation or by the client thread: wait for it
    frees = poll(lambda: log.entries(app.pid, "cuMemFree_v2", ptr=ptr), timeout=10,
                 what="the deferred cuMemFree_v2 of the converted pointer")
    assert [f["ret"] for f in frees] == [0]
    assert [e for e in log.entries(app.pid) if e["fn"].startswith("cuMemFreeAsync")] == [], \
        "a converted (managed) pointer must never reach cuMemFreeAsync"
    # it must not be freed before the work queued on its stream: an event recorded on that stream
    # (or a synchronisation of it) comes first
    launches = [e for e in log.entries(app.pid, "cuLaunchKernel") if e["stream"] == stream]
    ordered = [e for e in log.entries(app.pid)
               if e["fn"] in ("cuEventRecord", "cuStreamSynchronize") and e.get("stream") == stream
               and e["t0"] >= launches[-1]["t1"] and e["t0"] <= frees[0]["t0"]]
    assert ordered, "no event recorded on (or sync of) the stream between its work and the free"
    assert log.errors(app.pid) == []
    app.resume()
    assert app.finish() == 0


def test_own_managed_allocation_is_counted_and_freed(world, sched):
    # a virtual capacity, so that the view is the interposer's, not the driver's
    app = world.run("init", "ctx", 0, "meminfo", "managed", "1G", "meminfo", "free", "last", "meminfo",
                    env={"NVSHARE_GPU_MEMORY": "8G"})
    before, during, after = app.steps("meminfo")
    assert before["total"] == 8 * GIB
    assert before["free"] - during["free"] == GIB
    assert after["free"] == before["free"]
    (free,) = world.log.entries(app.pid, "cuMemFree_v2")
    assert free["kind"] == "managed" and free["ret"] == 0


def test_converted_allocations_are_in_the_memory_view_and_status(world, sched):
    app = world.app("init", "ctx", 0, "meminfo", "alloc", "256M", "managed", "128M", "meminfo", "pause",
                    "free", 0, "meminfo")
    app.paused()
    before, during = app.steps("meminfo")
    assert before["free"] - during["free"] == 384 * MIB

    def reported():
        c = sched.client(app.pid)
        return c and c["gpus"] and c["gpus"][0]["managed_bytes"] == 384 * MIB and c
    poll(reported, timeout=10, what="MEM_UPDATE with 384 MiB of managed memory")
    app.resume()
    assert app.finish() == 0
    assert app.steps("meminfo")[-1]["free"] == before["free"] - 128 * MIB


def test_vmm_allocations_are_counted_as_other_bytes(world, sched):
    app = world.app("init", "ctx", 0, "meminfo", "vmm", "64M", "meminfo", "pause", "vmmrelease", "meminfo",
                    "pause")
    app.paused()
    before, during = app.steps("meminfo")
    assert during["ret"] == 0 and app.wait_step("vmm")["ret"] == 0
    assert before["free"] - during["free"] == 64 * MIB
    (create,) = world.log.entries(app.pid, "cuMemCreate")
    assert create["ret"] == 0 and create["size"] == 64 * MIB, "VMM memory stays device memory"

    def other(n):
        c = sched.client(app.pid)
        return c and c["gpus"] and c["gpus"][0]["other_bytes"] == n
    poll(lambda: other(64 * MIB), timeout=10, what="MEM_UPDATE with 64 MiB of other_bytes")
    app.resume()
    app.paused(nth=2)
    assert app.steps("meminfo")[-1]["free"] == before["free"]
    poll(lambda: other(0), timeout=10, what="MEM_UPDATE back to 0 other_bytes after cuMemRelease")
    app.resume()
    assert app.finish() == 0


# ------------------------------------------------------------------------------------------------
# caps and the memory view


def _allocs(app):
    return [s["ret"] for s in app.steps("alloc")]


def _driver_allocs(world, app):
    return [e["size"] for e in world.log.entries(app.pid, "cuMemAllocManaged")]


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_default_cap_is_the_capacity(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "10G", "alloc", "10G", "alloc", "5G", "meminfo",
                    env={"NVSHARE_CONTEXT_RESERVE": 0})
    assert _allocs(app) == [0, OOM, 0], "past the capacity: CUDA_ERROR_OUT_OF_MEMORY"
    assert _driver_allocs(world, app) == [10 * GIB, 5 * GIB], "the refused allocation never reaches the driver"
    info = app.wait_step("meminfo")
    assert (info["total"], info["free"]) == (16 * GIB, GIB)


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_memory_limit_caps_the_process(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "3G", "alloc", "2G", "meminfo", "totalmem", 0,
                    env={"NVSHARE_GPU_MEMORY_LIMIT": "4G", "NVSHARE_CONTEXT_RESERVE": 0})
    assert _allocs(app) == [0, OOM]
    assert _driver_allocs(world, app) == [3 * GIB]
    info = app.wait_step("meminfo")
    assert (info["total"], info["free"]) == (4 * GIB, GIB)
    assert app.wait_step("totalmem")["total"] == 4 * GIB


def test_single_oversub_lifts_the_cap(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "10G", "alloc", "10G", "meminfo",
                    env={"NVSHARE_ENABLE_SINGLE_OVERSUB": "1"})
    assert _allocs(app) == [0, 0]
    assert _driver_allocs(world, app) == [10 * GIB, 10 * GIB]
    info = app.wait_step("meminfo")
    assert info["total"] == 16 * GIB and info["free"] == 0


def test_explicit_limit_applies_even_with_single_oversub(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "3G", "alloc", "2G",
                    env={"NVSHARE_ENABLE_SINGLE_OVERSUB": "1", "NVSHARE_GPU_MEMORY_LIMIT": "4G"})
    assert _allocs(app) == [0, OOM]


def test_virtual_capacity(world, sched):
    app = world.run("init", "ctx", 0, "totalmem", 0, "meminfo", "alloc", "6G", "alloc", "3G",
                    env={"NVSHARE_GPU_MEMORY": "8G"})
    assert app.wait_step("totalmem")["total"] == 8 * GIB
    assert app.wait_step("meminfo")["total"] == 8 * GIB
    assert _allocs(app) == [0, OOM]


def test_scheduler_capacity_lowers_the_client_capacity(world):
    world.scheduler(mode="off", extra_args=["--gpu-memory", "6G"])
    app = world.run("init", "ctx", 0, "meminfo", "alloc", "5G", "alloc", "2G")
    assert app.wait_step("meminfo")["total"] == 6 * GIB
    assert _allocs(app) == [0, OOM]


def test_default_context_reserve(world, sched):
    """native/README.md: 768 MiB are kept out of "free" unless NVSHARE_CONTEXT_RESERVE says otherwise."""
    app = world.run("init", "ctx", 0, "alloc", "1G", "meminfo")
    info = app.wait_step("meminfo")
    assert (info["total"], info["free"]) == (16 * GIB, 16 * GIB - GIB - 768 * MIB)


def test_context_reserve_is_kept_out_of_free(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "1G", "meminfo", env={"NVSHARE_CONTEXT_RESERVE": "512M"})
    info = app.wait_step("meminfo")
    assert (info["total"], info["free"]) == (16 * GIB, 16 * GIB - GIB - 512 * MIB)
