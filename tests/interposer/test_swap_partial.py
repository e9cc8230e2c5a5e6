"""A partial eviction (native/src/swap/swappick.c): a holder dropped with EVICT and evict_mib moves whole
allocations until at least that much has left (the smallest that covers what is left, else the
largest, and again) and reports what stays in RESIDENCY before it releases; what moved is intact
when the application reads it again. evict_mib 0, or as much as it has, moves everything.

The fake scheduler (fake_scheduler.py) drops with EVICT; the mock logs every call.
"""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import FEATURE_SWAP, MessageType

from testkit.waiting import poll

from .swap_steps import drop, pins
from .test_swap_store import HOST, MIB, _env, _ours, _prefetches, _residency

# Managed memory's paths (the backing kept for oversubscription); device memory of the library's
# own is tests/interposer/test_swap_vmm.py's.
pytestmark = pytest.mark.managed_backing

SIZES = ("1M", "4M", "2M")   # converted allocations, the last one filled and checked


def _app(world, recorder, *steps):
    recorder.welcome_features = FEATURE_SWAP
    allocs = [s for size in SIZES for s in ("alloc", size)]
    app = world.app("init", "ctx", 0, *allocs, "fill", 7, "launch", 1, "pause", *steps, env=_env())
    app.paused()
    return app


def _ranges(app) -> dict[int, tuple[int, int]]:
    """size in MiB -> (ptr, size) of the app's allocations."""
    return {ln["size"] // MIB: (ln["ptr"], ln["size"]) for ln in app.lines if ln.get("step") == "alloc"}


def _drop(recorder, n, evict_mib):
    drop(recorder, n, evict_mib=evict_mib)


@pytest.mark.parametrize("evict_mib, moved", [
    (2, [2]),           # the 2M covers it exactly: the smallest that covers
    (3, [4]),           # only the 4M covers 3M
    (5, [4, 1]),        # none covers 5M: the largest, then the smallest that covers the 1M left
    (6, [4, 2]),
    (7, [1, 2, 4]),     # all of it
    (9, [1, 2, 4]),     # more than it has: all of it
    (0, [1, 2, 4]),     # 0: all of it, as an older scheduler asks
])
def test_a_drop_moves_the_allocations_that_make_the_room_asked(world, recorder, evict_mib, moved):
    app = _app(world, recorder, "check", 7)
    _drop(recorder, 1, evict_mib)
    ranges = _ranges(app)
    out = sorted(_prefetches(world.log, app.pid, HOST))
    assert out == sorted(ranges[m] for m in moved)   # the first swap-out: by the driver's prefetch
    (report,) = _residency(recorder)
    assert (report.resident_bytes, report.host_bytes) == ((7 - sum(moved)) * MIB, sum(moved) * MIB)
    (released,) = recorder.messages(MessageType.LOCK_RELEASED)
    assert released.msg.evict_us > 0
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1


def test_with_host_copies_only_the_picked_ranges_are_copied_and_discarded(world, recorder):
    app = _app(world, recorder, "launch", 1, "pause", "check", 7)
    _drop(recorder, 1, 0)                  # everything out, and the host copies pinned meanwhile
    poll(lambda: len(pins(world.log, app)) == len(SIZES),
         what="the three host copies")
    app.resume()
    app.paused(nth=2)
    _drop(recorder, 2, 2)                  # 2M of room: the 2M range only, through the store
    ranges = _ranges(app)
    copies = sorted(e["bytes"] for e in _ours(world.log, app, "cuMemcpyDtoHAsync_v2"))
    assert copies == [16, 2 * MIB], "one range summed (two u64 read back) and copied out"
    discards = [(e["ptr"], e["size"]) for e in world.log.entries(app.pid, "cuMemDiscardBatchAsync")]
    assert ranges[2] in discards and ranges[1] not in discards and ranges[4] not in discards
    report = _residency(recorder)[-1]
    assert (report.resident_bytes, report.host_bytes) == (5 * MIB, 2 * MIB)
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1, "the moved range came back intact"


@pytest.mark.parametrize("evict_mib, moved", [(3, "managed"), (2, "alloc")])
def test_the_programs_own_managed_memory_moves_only_when_picked(world, recorder, evict_mib, moved):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "managed", "3M", "alloc", "1M", "alloc", "2M", "launch", 1,
                    "pause", env=_env())
    app.paused()
    _drop(recorder, 1, evict_mib)
    sizes = {"managed": 3 * MIB, "alloc": 2 * MIB}
    (picked,) = [(ln["ptr"], ln["size"]) for ln in app.lines
                 if ln.get("step") == moved and ln["size"] == sizes[moved]]
    assert _prefetches(world.log, app.pid, HOST) == [picked]
    (report,) = _residency(recorder)
    assert report.host_bytes == sizes[moved]
    app.resume()
    assert app.finish() == 0


def test_with_evict_background_the_same_part_moves_after_the_release(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    allocs = [s for size in SIZES for s in ("alloc", size)]
    app = world.app("init", "ctx", 0, *allocs, "fill", 7, "launch", 1, "pause", "check", 7,
                    env=_env(NVSHARE_EVICT="background"))
    app.paused()
    _drop(recorder, 1, 2)
    recorder.wait_count(MessageType.RESIDENCY, 1, device=0)
    assert _prefetches(world.log, app.pid, HOST) == [_ranges(app)[2]]
    (released,) = recorder.messages(MessageType.LOCK_RELEASED)
    (report,) = recorder.messages(MessageType.RESIDENCY)
    assert released.at_ns < report.at_ns, "released first, then moved"
    assert (report.msg.resident_bytes, report.msg.host_bytes) == (5 * MIB, 2 * MIB)
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
