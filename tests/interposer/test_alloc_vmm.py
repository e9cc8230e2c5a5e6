"""Converted allocations on the default backing (native/src/memory/vmm.c): device memory the library
reserves, creates and maps itself. Large allocations get a range of their own rounded up to the
granularity (the mock's: 2 MiB), small ones slots of a shared chunk; frees give the memory back
(a chunk once it is empty); an allocation the GPU has no room for waits for room, then fails with
CUDA_ERROR_OUT_OF_MEMORY; where the device or the settings rule VMM out, allocations are managed."""

import time

import pytest

from xpushare.wire.protocol import MessageType

from .harness import poll
from .swap_steps import theirs as _theirs

MIB = 1 << 20
OOM = 2


@pytest.fixture
def sched(world):
    return world.scheduler(mode="off")  # nothing here waits for a lock


def _created(log, app) -> list[int]:
    return [e["size"] for e in _theirs(log, app, "cuMemCreate") if e["ret"] == 0]


@pytest.mark.parametrize("steps", [("alloc", "3M"), ("allocpitch", 1000, 3000, 4), ("stream", "allocasync", "3M"),
                                   ("stream", "allocpool", "3M")], ids=["alloc", "pitch", "async", "pool"])
def test_every_device_allocation_becomes_memory_the_library_maps(world, sched, steps):
    app = world.run("init", "ctx", 0, *steps, "verify", "meminfo", env={"NVSHARE_CONTEXT_RESERVE": 0})
    step = app.lines[-3]
    assert step["ret"] == 0 and app.steps("verify")[0]["ok"] == 1
    log = world.log
    for fn in ("cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
               "cuMemAllocManaged"):
        assert _theirs(log, app, fn) == [], f"{fn} must not reach the driver"
    (reserved,) = _theirs(log, app, "cuMemAddressReserve")
    (mapped,) = _theirs(log, app, "cuMemMap")
    (access,) = _theirs(log, app, "cuMemSetAccess")
    assert reserved["ptr"] == mapped["ptr"] == access["ptr"] == step["ptr"]
    assert mapped["size"] == 4 * MIB and mapped["size"] % (2 * MIB) == 0
    assert reserved["t1"] <= mapped["t0"] and mapped["t1"] <= access["t0"]
    (info,) = app.steps("meminfo")
    assert info["total"] - info["free"] == 4 * MIB, "counted as what the GPU gives: the rounded range"


def test_small_allocations_share_a_chunk_that_goes_back_with_the_last_of_them(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "1000", "verify", "alloc", "100", "verify", "alloc", "300K",
                    "verify", "free", 0, "free", 2, "sleep", 50, "free", 1)
    ptrs = [s["ptr"] for s in app.steps("alloc")]
    assert [v["ok"] for v in app.steps("verify")] == [1, 1, 1]
    log = world.log
    (chunk,) = _theirs(log, app, "cuMemMap")
    assert chunk["size"] == 2 * MIB and _created(log, app) == [2 * MIB], "one granule for all three"
    assert all(chunk["ptr"] <= p < chunk["ptr"] + 2 * MIB and p % 512 == 0 for p in ptrs)
    spans = sorted((p, p + s["size"]) for p, s in zip(ptrs, app.steps("alloc")))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "no two overlap"
    (gone,) = _theirs(log, app, "cuMemAddressFree")
    last_free = [s for s in app.steps("free")][-1]
    assert gone["ptr"] == chunk["ptr"] and gone["t0"] > app.steps("sleep")[0]["t"], \
        "the chunk stays until its last allocation is freed"
    assert last_free["ret"] == 0


def test_an_async_free_gives_the_range_back_once_the_stream_reached_it(world, sched):
    app = world.run("init", "ctx", 0, "stream", "allocasync", "3M", "launch", 2, "freeasync", "last",
                    "streamsync", "alloc", "4K")
    (alloc,) = app.steps("allocasync")
    log = world.log
    assert _theirs(log, app, "cuMemFreeAsync") == [] and _theirs(log, app, "cuMemFree_v2") == []
    (unmap,) = [e for e in log.entries(app.pid, "cuMemUnmap") if e["ptr"] == alloc["ptr"]]
    (free,) = app.steps("freeasync")
    assert free["ret"] == 0 and unmap["t0"] >= free["t"] - 10**9


def _free_in_hand_then_alloc(world, gpu_bytes):
    """cuMemFreeAsync wakes the client thread, which frees the range once the stream reached it;
    that free is held inside the driver's cuMemRelease, its 4 MiB still taken, while the program,
    its stream synchronised, allocates 4 MiB on a GPU of `gpu_bytes`, then pauses again (so that
    it outlives the free). Returns the app (paused before its allocation, the free in hand) and the
    hold file."""
    hold = world.dir / "hold"
    app = world.app("init", "ctx", 0, "stream", "allocasync", "3M", "freeasync", "last",
                    "streamsync", "pause", "alloc", "4M", "pause",
                    env={"MOCK_CUDA_TOTAL_MEM": gpu_bytes, "NVSHARE_GPU_MEMORY": "64M",
                         "NVSHARE_ALLOC_WAIT_MS": 0, "MOCK_CUDA_HOLD_FILE": hold,
                         "MOCK_CUDA_HOLD_BEFORE_RELEASE": 1, "NVSHARE_CONTEXT_RESERVE": 0})
    app.paused()
    poll(lambda: world.log.entries(app.pid, "mock_hold", of="cuMemRelease"), timeout=20,
         what="the client thread's free of the range, held inside the driver")
    return app, hold


def _finish_after_the_free(world, app):
    """The time the held free was done; the app, paused after its allocation, then ends."""
    app.paused(nth=2)
    (release,) = poll(lambda: [e for e in world.log.entries(app.pid, "cuMemRelease") if e["ret"] == 0],
                      timeout=20, what="the free, let go")
    app.resume()
    assert app.finish() == 0
    return release["t1"]


def test_an_allocation_without_room_waits_for_the_free_another_thread_has_in_hand(world, sched):
    """4 MiB + 4 MiB do not fit the 6 MiB GPU, but the program freed the first 4 MiB and reached
    that point of its stream: the allocation that finds no room waits for the free in hand, then
    succeeds. Before, it failed with CUDA_ERROR_OUT_OF_MEMORY beside a free still under way."""
    app, hold = _free_in_hand_then_alloc(world, "6M")
    app.resume()
    time.sleep(0.05)  # the allocation has found no room and waits (at most 200 ms)
    hold.touch()
    released = _finish_after_the_free(world, app)
    (alloc,) = app.steps("alloc")
    assert alloc["ret"] == 0
    assert released <= alloc["t"], "the allocation came back before the free was done"


def test_an_allocation_with_room_never_waits_for_another_threads_free(world, sched):
    """The same on a GPU with room for both: the allocation returns while the free is held."""
    app, hold = _free_in_hand_then_alloc(world, "64M")
    app.resume()
    (alloc,) = poll(lambda: app.steps("alloc"), timeout=20, what="the allocation, the free still held")
    hold.touch()
    assert alloc["ret"] == 0 and alloc["t"] < _finish_after_the_free(world, app)


def test_the_cap_refuses_before_the_driver_is_asked(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "3M", "alloc", "3M", "alloc", "1M",
                    env={"NVSHARE_GPU_MEMORY_LIMIT": "6M"})
    assert [s["ret"] for s in app.steps("alloc")] == [0, OOM, 0], "4M + 4M > 6M; 4M + a 2M chunk fits"
    assert _created(world.log, app) == [4 * MIB, 2 * MIB]
    assert len(_theirs(world.log, app, "cuMemAddressReserve")) == 2


def test_an_allocation_the_gpu_has_no_room_for_waits_then_fails(world, sched):
    env = {"MOCK_CUDA_TOTAL_MEM": "64M", "NVSHARE_ALLOC_WAIT_MS": 300, "NVSHARE_GPU_MEMORY": "128M"}
    app = world.run("init", "ctx", 0, "alloc", "40M", "alloc", "40M", env=env)
    assert [s["ret"] for s in app.steps("alloc")] == [0, OOM]
    tries = [e for e in _theirs(world.log, app, "cuMemCreate") if e["size"] == 40 * MIB]
    assert [e["ret"] for e in tries][0] == 0 and set(e["ret"] for e in tries[1:]) == {OOM}
    assert len(tries) >= 4 and tries[-1]["t1"] - tries[1]["t0"] >= 250e6, "retried while it waited"
    assert _theirs(world.log, app, "cuMemAllocManaged") == [], "never oversubscribed with managed memory"
    frees = _theirs(world.log, app, "cuMemAddressFree")
    assert len(frees) == 1, "the waiting allocation's address range is given back"

    at_once = world.run("init", "ctx", 0, "alloc", "40M", "alloc", "40M", env={**env, "NVSHARE_ALLOC_WAIT_MS": 0})
    assert [s["ret"] for s in at_once.steps("alloc")] == [0, OOM]
    assert len([e for e in _theirs(world.log, at_once, "cuMemCreate") if e["size"] == 40 * MIB]) == 2


def test_the_waiting_allocation_gets_the_room_once_it_is_freed(world, sched):
    env = {"MOCK_CUDA_TOTAL_MEM": "64M", "NVSHARE_ALLOC_WAIT_MS": 20000, "NVSHARE_GPU_MEMORY": "128M"}
    app = world.run("init", "ctx", 0, "alloc", "40M", "thread", "{", "sleep", 300, "free", 0, "}",
                    "alloc", "40M", "verify", "join", env=env)
    assert [s["ret"] for s in app.steps("alloc")] == [0, 0] and app.steps("verify")[0]["ok"] == 1
    log = world.log
    (freed,) = [e for e in log.entries(app.pid, "cuMemRelease") if e["size"] == 40 * MIB]
    ok = [e for e in log.entries(app.pid, "cuMemCreate") if e["size"] == 40 * MIB and e["ret"] == 0]
    failed = [e for e in log.entries(app.pid, "cuMemCreate") if e["ret"] == OOM]
    assert len(ok) == 2 and failed and failed[0]["t1"] <= freed["t0"] <= ok[1]["t0"]


def test_the_footprint_the_scheduler_hears_is_what_the_gpu_gives(world, recorder):
    app = world.run("init", "ctx", 0, "alloc", "3M", "alloc", "1000", "alloc", "5000", "launch", 1,
                    env={"NVSHARE_IDLE_RELEASE_MS": 0})
    assert app.finish() == 0
    updates = [r.footprint for r in recorder.messages(MessageType.MEM_UPDATE)]
    assert (6 * MIB, 0) in updates, updates


@pytest.mark.parametrize("env, why", [({"MOCK_CUDA_VMM": 0}, "does not support virtual memory management"),
                                      ({"NVSHARE_BACKING": "managed"}, None),
                                      ({"NVSHARE_ENABLE_SINGLE_OVERSUB": 1}, None)],
                         ids=["device-without-vmm", "backing-managed", "single-oversub"])
def test_where_vmm_is_ruled_out_allocations_are_managed(world, sched, env, why):
    app = world.run("init", "ctx", 0, "alloc", "3M", "verify", env=env)
    assert app.steps("verify")[0]["ok"] == 1
    log = world.log
    assert [e["size"] for e in _theirs(log, app, "cuMemAllocManaged")] == [3 * MIB]
    assert _theirs(log, app, "cuMemCreate") == []
    warnings = [ln for ln in app.stderr().splitlines() if "converted allocations are managed memory" in ln]
    assert len(warnings) == (1 if why else 0) and all(why in w for w in warnings)
