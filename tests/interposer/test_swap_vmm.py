"""Converted memory as device memory the library maps itself (native/src/memory/vmm.c), the default
backing: a swap-out copies a range into its pinned host copy and then gives its physical memory
back to the driver (cuMemUnmap + cuMemRelease: the driver's cuMemGetInfo shows it free); a swap-in
maps new physical memory at the same address and copies the bytes back before any of the
application's work runs. The mock's cuMemCreate gives zeroed memory, so a pattern read back intact
after a swap-in proves it was really restored.

The fake scheduler (fake_scheduler.py) offers SWAP, drops with EVICT and records RESIDENCY; the
mock logs every call with CLOCK_MONOTONIC times.
"""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import FEATURE_SWAP, RESIDENCY_REFUSED, MessageType

from .harness import build_mock_variant
from .swap_steps import drop, idle_env, ours, pins, residency, theirs, unpins

MIB = 1 << 20
TOTAL = 16 << 30  # the mock's memory per device


_env, _ours, _theirs, _drop, _residency = idle_env, ours, theirs, drop, residency


def _driver_free(log, app) -> list[int]:
    """What the driver said was free at each of the application's cuMemGetInfo calls."""
    return [e["free"] for e in log.entries(app.pid, "cuMemGetInfo_v2")]


def test_a_drop_gives_the_memory_back_and_a_grant_maps_it_back_at_the_same_address(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "1000", "alloc", "3M", "fill", 1, "meminfo", "launch", 1,
                    "pause", "meminfo", "check", 1, env=_env())
    app.paused()
    _drop(recorder, 1)
    log = world.log
    small, big = [(ln["ptr"], ln["size"]) for ln in app.lines if ln.get("step") == "alloc"]
    maps = {e["ptr"]: e for e in log.entries(app.pid, "cuMemMap")}
    chunk = [p for p in maps if p <= small[0] < p + 2 * MIB]
    assert big[0] in maps and maps[big[0]]["size"] == 4 * MIB, "3 MiB rounded up to the granularity"
    assert len(chunk) == 1 and maps[chunk[0]]["size"] == 2 * MIB, "the small one: a slot of a chunk"
    assert log.entries(app.pid, "cuMemAllocManaged") == [] and _theirs(log, app, "cuMemAlloc_v2") == []
    released = recorder.messages(MessageType.LOCK_RELEASED)[0]

    # out: each range copied into a host copy pinned for it, then unmapped and released
    for ptr, size in ((big[0], 4 * MIB), (chunk[0], 2 * MIB)):
        (pinned,) = [e for e in pins(log, app) if e["size"] == size]
        (out,) = [e for e in _ours(log, app, "cuMemcpyDtoHAsync_v2") if e["bytes"] == size]
        (unmap,) = [e for e in log.entries(app.pid, "cuMemUnmap") if e["ptr"] == ptr]
        (release,) = [e for e in log.entries(app.pid, "cuMemRelease") if e["handle"] == maps[ptr]["handle"]]
        assert pinned["t1"] <= out["t0"] and out["t1"] <= unmap["t0"] and unmap["t1"] <= release["t0"]
        assert release["t1"] <= released.at_ns, "the memory is free before the next holder starts"
    assert log.entries(app.pid, "cuMemDiscardBatchAsync") == []
    assert [e for e in log.entries(app.pid, "cuMemPrefetchAsync_v2") if e["ret"] == 0] == []
    (gone,) = _residency(recorder)
    assert (gone.resident_bytes, gone.host_bytes) == (0, 6 * MIB)

    app.resume()  # meminfo, then "check" reads the big range: the grant swaps both back in first
    assert app.finish() == 0
    assert _driver_free(log, app) == [TOTAL - 6 * MIB, TOTAL], "swapped out: the driver has it back"
    assert app.steps("check")[0]["ok"] == 1
    again = [e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == big[0]]
    assert len(again) == 2 and again[1]["handle"] != again[0]["handle"], "new memory, same address"
    (back,) = [e for e in _ours(log, app, "cuMemcpyHtoDAsync_v2") if e["bytes"] == 4 * MIB]
    (read,) = log.entries(app.pid, "cuMemcpyDtoH_v2")
    assert again[1]["t1"] <= back["t0"] and back["t1"] <= read["t0"], "mapped, copied, then the app"
    assert (_residency(recorder)[-1].resident_bytes, _residency(recorder)[-1].host_bytes) == (6 * MIB, 0)
    assert recorder.errors == []


def test_memory_not_written_since_it_came_back_leaves_without_a_copy(world, recorder):
    """Out, back, out again unwritten: the checksum finds the host copy still valid, so the second
    swap-out copies nothing and only gives the memory back; written in between, it copies again."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 1, "launch", 1, "pause",
                    "check", 1, "pause", "fill", 2, "pause", "check", 2, env=_env())
    for n in (1, 2, 3):
        app.paused(nth=n)
        _drop(recorder, n)
        app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1, 1]
    log = world.log
    releases = [r.at_ns for r in recorder.messages(MessageType.LOCK_RELEASED)]
    copies = [e["t0"] for e in _ours(log, app, "cuMemcpyDtoHAsync_v2") if e["bytes"] == 4 * MIB]
    unmaps = [e["t0"] for e in log.entries(app.pid, "cuMemUnmap")]
    assert len(unmaps) == 3, "every swap-out gives the memory back"
    assert len(copies) == 2 and copies[0] < releases[0] < releases[1] < copies[1] < releases[2], \
        "copied at the first and third swap-outs, not the second (clean)"


def test_a_free_while_swapped_out_gives_everything_back_and_nothing_returns(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 1, "launch", 1, "pause", "free", "last",
                    "launch", 1, env=_env())
    app.paused()
    _drop(recorder, 1)
    app.resume()
    assert app.finish() == 0
    log = world.log
    (alloc,) = app.steps("alloc")
    (pinned,) = pins(log, app)
    assert [e["ptr"] for e in unpins(log, app)] == [pinned["ptr"]]
    assert [e["ret"] for e in log.entries(app.pid, "cuMemAddressFree") if e["ptr"] == alloc["ptr"]] == [0]
    assert len([e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == alloc["ptr"]]) == 1
    assert _theirs(log, app, "cuMemFree_v2") == [], "the driver never sees a free of our memory"
    assert recorder.messages(MessageType.MEM_UPDATE)[-1].footprint == (0, 0)


@pytest.fixture(scope="module")
def cuda12_driver(tmp_path_factory):
    """A driver without cuMemDiscardBatchAsync, which came with CUDA 13 (r580): every CUDA 12 one."""
    return build_mock_variant(tmp_path_factory.mktemp("mock-cuda12"), "MOCK_CUDA_NO_DISCARD")


def test_without_the_discard_call_our_memory_still_leaves_and_comes_back(world, recorder, cuda12_driver):
    """The discard is a hint for managed ranges only: device memory of our own is released, not
    discarded, so a CUDA 12 driver still gets it back at a drop, and the range comes back intact."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 1, "meminfo", "launch", 1, "pause",
                    "meminfo", "check", 1, env=_env(LD_LIBRARY_PATH=cuda12_driver))
    app.paused()
    _drop(recorder, 1)
    app.resume()
    assert app.finish() == 0
    log = world.log
    (alloc,) = app.steps("alloc")
    assert [e["ptr"] for e in log.entries(app.pid, "cuMemUnmap")] == [alloc["ptr"]]
    assert _driver_free(log, app) == [TOTAL - 4 * MIB, TOTAL], "swapped out: the driver has it back"
    assert app.steps("check")[0]["ok"] == 1
    (gone,) = [r for r in _residency(recorder) if r.resident_bytes == 0]
    assert gone.host_bytes == 4 * MIB


def test_without_the_store_a_partial_drop_moves_what_can_move(world, recorder):
    """NVSHARE_SWAP=off: device memory of our own cannot leave, so a drop that asks for room picks
    from what the driver's prefetch can move (the program's own managed memory), not the larger
    range of ours that would stay: the room asked is made where it can be."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "managed", "2M", "alloc", "7M", "launch", 1, "pause",
                    env=_env(NVSHARE_SWAP="off"))
    app.paused()
    _drop(recorder, 1, evict_mib=3)
    app.resume()
    assert app.finish() == 0
    (managed,) = [(ln["ptr"], ln["size"]) for ln in app.lines if ln.get("step") == "managed"]
    to_host = [(e["ptr"], e["size"]) for e in world.log.entries(app.pid, "cuMemPrefetchAsync_v2")
               if e["loc_type"] == 2]
    assert to_host == [managed], "the managed range moves; ours cannot"
    assert world.log.entries(app.pid, "cuMemUnmap") == []
    (answer,) = _residency(recorder)
    assert answer.resident_bytes == 8 * MIB and answer.flags & RESIDENCY_REFUSED


def test_a_process_on_two_gpus_keeps_its_memory_where_the_other_gpu_can_reach_it(world, recorder):
    """Device 1 dropped with EVICT while the process holds device 0: a copy issued in device 0's
    context can read device 1's memory (one address space), and device 1's gate does not see it.
    So memory of our own stays on a GPU while the process has work on another: nothing is released,
    and the read from device 0's context finds its bytes (it used to find an unmapped range)."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 1, "alloc", "3M", "fill", 1, "launch", 1,
                    "ctx", 0, "launch", 1, "pause", "check", 1, "ctx", 1, "check", 1,
                    env=_env(MOCK_CUDA_DEVICES=2))
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)  # it holds device 0 too
    _drop(recorder, 1, device=1)
    app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1, 1]
    assert world.log.entries(app.pid, "cuMemUnmap") == []
    assert "several GPUs" in app.stderr(), "the process says once why its memory stays"
    (stayed,) = [r for r in _residency(recorder) if r.device == 1]
    assert stayed.resident_bytes == 4 * MIB and stayed.flags & RESIDENCY_REFUSED, \
        "the scheduler hears that it stays, so it counts it rather than what a drop may keep"


def test_a_second_gpu_opened_while_the_first_gpus_memory_is_out_brings_it_back_first(world, recorder):
    """The process's memory of our own on device 0 is out (a drop with EVICT, one GPU then). It then
    opens device 1 and reads device 0's memory from there: device 1's gate does not cover device 0,
    so opening it brings device 0's memory back first (device 0's lock asked again, the range mapped
    again before the read), and the read finds the bytes (it used to find an unmapped range)."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 1, "launch", 1,
                    "pause", "ctx", 1, "check", 1, env=_env(MOCK_CUDA_DEVICES=2))
    app.paused()
    _drop(recorder, 1)
    log = world.log
    (ptr,) = [ln["ptr"] for ln in app.lines if ln.get("step") == "alloc"]
    assert [e["ptr"] for e in log.entries(app.pid, "cuMemUnmap")] == [ptr], "device 0's range is out"
    app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1]
    asked = [m for m in recorder.messages(MessageType.REQ_LOCK) if m.msg.device == 0]
    assert len(asked) == 2, "opening device 1 asked for device 0's lock again"
    remaps = [e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == ptr][1:]
    (read,) = [e for e in _theirs(log, app, "cuMemcpyDtoH_v2")]
    assert len(remaps) == 1 and remaps[0]["t1"] <= read["t0"], "mapped back before the read"


def test_every_thread_on_the_second_gpu_waits_for_the_first_gpus_memory(world, recorder):
    """As above, with two threads on device 1: one makes its first context known and waits for
    device 0's memory (its grant held back a second); the other, a moment later on the same
    context, finds that context known already. It waits too, and its read finds the bytes."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 1, "launch", 1, "pause",
                    "thread", "{", "ctx", 1, "launch", 1, "}",
                    "sleep", 300, "ctx", 1, "check", 1, "join", env=_env(MOCK_CUDA_DEVICES=2))
    app.paused()
    _drop(recorder, 1)
    recorder.grant_delay_s = {0: 1.0}
    app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1]
    assert recorder.errors == []
