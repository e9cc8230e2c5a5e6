"""Fast context switches through the driver's prefetch (docs/protocol.md): the path every managed
range takes without the swap store (NVSHARE_SWAP=off here; converted managed ranges also on a driver
without cuMemDiscardBatchAsync), and the one the program's own managed memory always takes
(test_swap_store.py has the swap store's).
A DROP_LOCK with EVICT makes the client drain,
move every managed allocation it holds on that device to the host in bulk (cuMemPrefetchAsync to
the host location on a stream of its own, then a synchronisation of that stream) and only then
answer LOCK_RELEASED with the time it took; a LOCK_OK with PREFETCH brings the same allocations
back to the device in bulk, before the application's threads run (NVSHARE_PREFETCH=wait, the
default), while they run (overlap), or not at all (off: demand faults).

The fake scheduler (fake_scheduler.py) drives drops and grants with their flags; the mock driver
logs every prefetch (pointer, size, destination, stream) with CLOCK_MONOTONIC times comparable with
the scheduler's, and MOCK_CUDA_PREFETCH_US gives each prefetch a duration.
"""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import DROP_EVICT, GRANT_PREFETCH, MessageType, ReleaseReason

from .harness import build_mock_variant

# Managed memory's paths (the backing kept for oversubscription); device memory of the library's
# own is tests/interposer/test_swap_vmm.py's.
pytestmark = pytest.mark.managed_backing

HOST, DEVICE = 2, 1  # the mock log's loc_type (CUmemLocationType)
PREFETCH_FNS = ("cuMemPrefetchAsync_v2", "cuMemPrefetchAsync")
CAPTURE_UNSUPPORTED = 900
PREFETCH_US = 20_000  # what each prefetch call takes in the mock, unless a test says otherwise
SYNC_US = 30_000      # what the drain's cuCtxSynchronize takes


def _prefetches(log, pid, loc_type=None) -> list[dict]:
    return [e for e in log.entries(pid) if e["fn"] in PREFETCH_FNS
            and (loc_type is None or e["loc_type"] == loc_type)]


def _ranges(entries) -> set[tuple[int, int]]:
    return {(e["ptr"], e["size"]) for e in entries}


def _allocated(app) -> list[tuple[int, int]]:
    """(ptr, size) of the app's live device and managed allocations (not VMM), in order."""
    freed = {ln["ptr"] for ln in app.steps("free") if ln["ret"] == 0}
    return [(ln["ptr"], ln["size"]) for ln in app.lines
            if ln.get("step") in ("alloc", "managed", "allocpitch") and ln.get("ret") == 0
            and ln["ptr"] not in freed]


def _own_stream(log, pid, app) -> int:
    """The stream the library created for itself (not on an application thread), non-blocking."""
    app_tids = {ln["tid"] for ln in app.lines}
    ours = [e for e in log.entries(pid, "cuStreamCreate") if e["tid"] not in app_tids]
    assert len(ours) == 1, f"one stream of our own per context: {ours}"
    assert ours[0]["ret"] == 0 and ours[0]["flags"] == 1, "CU_STREAM_NON_BLOCKING"
    return ours[0]["stream"]


def _released(recorder) -> list:
    return [r.msg for r in recorder.messages(MessageType.LOCK_RELEASED)]


def _env(**extra):
    env = {"NVSHARE_IDLE_RELEASE_MS": 0, "MOCK_CUDA_PREFETCH_US": PREFETCH_US, "MOCK_CUDA_SYNC_US": SYNC_US,
           "NVSHARE_SWAP": "off"}
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------------
# eviction


def test_evict_moves_exactly_this_devices_managed_allocations_to_host_then_releases(world, recorder):
    """Converted (cuMemAlloc, cuMemAllocPitch) and own managed memory on device 0 go to the host:
    not the VMM allocation, not the freed one, not device 1's. Issued after the drain, on our own
    non-blocking stream, synchronised before LOCK_RELEASED, whose evict_us covers it."""
    app = world.app("init", "ctx", 1, "alloc", "5M",
                    "ctx", 0, "alloc", "1M", "managed", "2M", "allocpitch", 100, 3, 4, "vmm", "4M",
                    "alloc", "3M", "free", "last", "launch", 1, "pause", "launch", 1, "pause",
                    env=_env(MOCK_CUDA_DEVICES=2, NVSHARE_EVICT="wait"))
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)
    recorder.drop(0, flags=DROP_EVICT)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    log = world.log

    device1, *on_device0 = _allocated(app)  # the first allocation was made on device 1
    expected = set(on_device0)
    assert len(expected) == 3, "1M, 2M managed, the pitched one (not the freed 3M)"
    evicted = _prefetches(log, app.pid)
    assert _ranges(evicted) == expected and len(evicted) == len(expected), evicted
    assert device1 not in _ranges(evicted)
    assert all(e["ret"] == 0 and e["loc_type"] == HOST for e in evicted)

    stream = _own_stream(log, app.pid, app)
    assert {e["stream"] for e in evicted} == {stream}
    (drain,) = log.entries(app.pid, "cuCtxSynchronize")
    assert drain["t1"] <= min(e["t0"] for e in evicted), "evicted after the drain"
    syncs = [e for e in log.entries(app.pid, "cuStreamSynchronize") if e["stream"] == stream]
    (released_msg,) = recorder.messages(MessageType.LOCK_RELEASED)
    assert syncs and max(e["t1"] for e in evicted) <= syncs[0]["t0"], "synchronised after issuing"
    assert syncs[0]["t1"] <= released_msg.at_ns, "released only after the eviction finished"

    (rel,) = _released(recorder)
    assert rel.reason == ReleaseReason.DROPPED
    assert rel.evict_us >= len(expected) * PREFETCH_US
    assert rel.drain_us >= SYNC_US
    assert rel.prefetch_us == 0, "this grant had no PREFETCH"

    app.resume()  # the next grant has no PREFETCH: nothing comes back in bulk
    app.paused(nth=2)
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    assert _prefetches(log, app.pid, DEVICE) == []
    app.resume()
    assert app.finish() == 0
    assert recorder.errors == []


def test_in_background_the_eviction_comes_after_the_release(world, recorder):
    """NVSHARE_EVICT=background: LOCK_RELEASED goes right after the drain (evict_us 0) and the bulk
    move to host follows, while the next holder starts; the prefetch back at the next grant goes on
    the same stream, after it."""
    app = world.app("init", "ctx", 0, "alloc", "1M", "alloc", "2M", "launch", 1, "pause",
                    "launch", 1, env=_env(NVSHARE_EVICT="background"))
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)
    recorder.drop(0, flags=DROP_EVICT)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    (released_msg,) = recorder.messages(MessageType.LOCK_RELEASED)
    assert released_msg.msg.evict_us == 0
    recorder.grant_flags = GRANT_PREFETCH
    app.resume()
    recorder.wait_count(MessageType.REQ_LOCK, 2, device=0)
    assert app.finish() == 0
    log = world.log
    stream = _own_stream(log, app.pid, app)
    evicted = _prefetches(log, app.pid, HOST)
    assert len(evicted) == 2 and {e["stream"] for e in evicted} == {stream}
    # each mock prefetch takes PREFETCH_US: the release reached the scheduler before they were done
    assert released_msg.at_ns < max(e["t1"] for e in evicted), "released before evicting"
    back = _prefetches(log, app.pid, DEVICE)
    assert _ranges(back) == _ranges(evicted) and {e["stream"] for e in back} == {stream}
    assert min(e["t0"] for e in back) >= max(e["t1"] for e in evicted)
    assert recorder.errors == []


def test_a_bad_evict_setting_warns_once_and_uses_wait(world, recorder):
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, env=_env(NVSHARE_EVICT="later"))
    assert app.finish() == 0
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_EVICT" in ln]
    assert len(warnings) == 1 and "using wait" in warnings[0], app.stderr()


def test_a_bad_swap_setting_warns_once_and_uses_the_swap_store(world, recorder):
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, env=_env(NVSHARE_SWAP="maybe"))
    assert app.finish() == 0
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_SWAP" in ln]
    assert len(warnings) == 1 and "using on" in warnings[0], app.stderr()


def test_a_drop_without_evict_moves_nothing(world, recorder):
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "1M", "launch", 1, "pause",
                    env=_env())
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    (rel,) = _released(recorder)
    assert (rel.evict_us, rel.prefetch_us) == (0, 0)
    assert rel.drain_us >= SYNC_US, "drain_us is the drain's time"
    assert _prefetches(world.log, app.pid) == []
    app.resume()
    assert app.finish() == 0


# ------------------------------------------------------------------------------------------------
# prefetch at the grant


def _evict_then_regrant(world, recorder, app, flags=GRANT_PREFETCH):
    """app holds the lock and is paused: drop it with EVICT, let it ask again (resume) and get a
    grant with `flags`."""
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    recorder.grant_flags = flags
    recorder.drop(0, flags=DROP_EVICT)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    app.resume()


@pytest.mark.parametrize("mode", ["wait", None], ids=["wait", "default"])
def test_prefetch_grant_brings_the_allocations_back_before_the_app_runs(world, recorder, mode):
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "2M", "vmm", "4M", "launch", 1, "pause",
                    "launch", 1, "pause", env=_env(NVSHARE_PREFETCH=mode))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)
    log = world.log
    expected = set(_allocated(app))
    back = _prefetches(log, app.pid, DEVICE)
    assert _ranges(back) == expected and len(back) == len(expected), back
    assert all(e["ret"] == 0 and e["loc_id"] == 0 for e in back)
    stream = _own_stream(log, app.pid, app)
    assert {e["stream"] for e in back} == {stream}

    # wait: the application's next launch only after the prefetch calls and their synchronisation
    (grant,) = [r for r in recorder.sent_messages(MessageType.LOCK_OK) if r.msg.flags & GRANT_PREFETCH]
    launch = [e for e in log.work(app.pid) if e["t0"] > grant.at_ns]
    assert launch, "the launch after the grant ran"
    sync = [e for e in log.entries(app.pid, "cuStreamSynchronize")
            if e["stream"] == stream and e["t0"] >= max(b["t1"] for b in back)]
    assert sync and launch[0]["t0"] >= sync[0]["t1"] >= max(b["t1"] for b in back)

    recorder.drop(0)  # the release after a prefetched grant reports the prefetch
    recorder.wait_count(MessageType.LOCK_RELEASED, 2)
    rel = _released(recorder)[1]
    assert rel.prefetch_us >= len(expected) * PREFETCH_US
    assert rel.evict_us == 0
    assert len(_prefetches(log, app.pid, HOST)) == len(expected), "no eviction without EVICT"
    app.resume()
    assert app.finish() == 0


def test_overlap_lets_the_app_run_during_the_prefetch_and_times_it_with_events(world, recorder):
    slow = 1_000_000  # each prefetch takes 1 s: the application's launch must not wait for them
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "1M", "launch", 1, "pause",
                    "launch", 1, "pause", env=_env(NVSHARE_PREFETCH="overlap", MOCK_CUDA_PREFETCH_US=slow))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2, timeout=30)
    log = world.log
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 2, timeout=30)

    back = _prefetches(log, app.pid, DEVICE)
    assert len(back) == 2
    (grant,) = [r for r in recorder.sent_messages(MessageType.LOCK_OK) if r.msg.flags & GRANT_PREFETCH]
    launch = [e for e in log.work(app.pid) if e["t0"] > grant.at_ns][0]
    assert launch["t0"] < max(b["t1"] for b in back), "the launch waited for the prefetch"

    # timed on our stream: an event before and one after the prefetch calls, then the elapsed time
    stream = _own_stream(log, app.pid, app)
    marks = [e for e in log.entries(app.pid, "cuEventRecord") if e["stream"] == stream]
    assert len(marks) == 2
    assert marks[0]["t1"] <= min(b["t0"] for b in back) and max(b["t1"] for b in back) <= marks[1]["t0"]
    elapsed = [e for e in log.entries(app.pid) if e["fn"].startswith("cuEventElapsedTime")
               and (e["start"], e["end"]) == (marks[0]["event"], marks[1]["event"])]
    assert elapsed and elapsed[0]["ret"] == 0
    rel = _released(recorder)[1]
    assert rel.prefetch_us >= 2 * slow
    app.resume()
    assert app.finish() == 0


def test_prefetch_off_evicts_but_brings_nothing_back(world, recorder):
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "1M", "launch", 1, "pause",
                    "launch", 1, "pause", env=_env(NVSHARE_PREFETCH="off"))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 2)
    log = world.log
    assert len(_prefetches(log, app.pid, HOST)) == 2, "eviction is real with off too"
    assert _prefetches(log, app.pid, DEVICE) == []
    assert _released(recorder)[1].prefetch_us == 0
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    app.resume()
    assert app.finish() == 0


def test_a_bad_prefetch_setting_warns_once_and_uses_wait(world, recorder):
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", "launch", 1, "pause",
                    env=_env(NVSHARE_PREFETCH="sometimes"))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)
    log = world.log
    back = _prefetches(log, app.pid, DEVICE)
    assert len(back) == 1
    (grant,) = [r for r in recorder.sent_messages(MessageType.LOCK_OK) if r.msg.flags & GRANT_PREFETCH]
    launch = [e for e in log.work(app.pid) if e["t0"] > grant.at_ns][0]
    assert launch["t0"] >= back[0]["t1"], "wait: the launch came after the prefetch"
    app.resume()
    assert app.finish() == 0
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_PREFETCH" in ln]
    assert len(warnings) == 1 and "sometimes" in warnings[0], app.stderr()


# ------------------------------------------------------------------------------------------------
# correctness first: captures


def test_no_bulk_move_while_a_capture_is_in_progress(world, recorder):
    """A drop with EVICT and a grant with PREFETCH during a global-mode capture: both bulk moves are
    skipped (the data moves by faults), nothing waits for them, and the capture is not disturbed."""
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "1M", "launch", 1,
                    "stream", "capture-begin", "global", "launch", 2, "pause",
                    "thread", "{", "ctx", 0, "stream", "launch", 1, "}", "join", "pause",
                    "capture-end", "graph-launch", env=_env())
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)  # the thread's launch ran: it was granted (with PREFETCH) without waiting
    assert [r.msg.flags for r in recorder.sent_messages(MessageType.LOCK_OK)] == [0, GRANT_PREFETCH]
    app.resume()
    assert app.finish() == 0
    assert [s["ret"] for s in app.steps("launch")] == [0, 0, 0]
    assert app.wait_step("capture-end")["ret"] == 0, "the capture was invalidated"
    assert app.wait_step("graph-launch")["ret"] == 0
    log = world.log
    assert _prefetches(log, app.pid) == []
    assert _released(recorder)[0].evict_us == 0
    assert [e for e in log.entries(app.pid) if e["ret"] == CAPTURE_UNSUPPORTED or e.get("error")] == []


# ------------------------------------------------------------------------------------------------
# drivers without cuMemPrefetchAsync_v2 (before CUDA 12.2), or without prefetch at all


@pytest.fixture(scope="module")
def old_driver(tmp_path_factory):
    return build_mock_variant(tmp_path_factory.mktemp("mock-old"), "MOCK_CUDA_NO_PREFETCH_V2")


@pytest.fixture(scope="module")
def no_prefetch_driver(tmp_path_factory):
    return build_mock_variant(tmp_path_factory.mktemp("mock-noprefetch"), "MOCK_CUDA_NO_PREFETCH")


def test_an_older_driver_gets_the_device_based_prefetch(world, recorder, old_driver):
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", "launch", 1, "pause",
                    env=_env(LD_LIBRARY_PATH=old_driver))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)
    log = world.log
    moves = [(e["fn"], e["loc_type"], e["loc_id"], e["ret"]) for e in _prefetches(log, app.pid)]
    assert moves == [("cuMemPrefetchAsync", HOST, -1, 0), ("cuMemPrefetchAsync", DEVICE, 0, 0)]
    app.resume()
    assert app.finish() == 0


def test_a_driver_without_prefetch_still_switches(world, recorder, no_prefetch_driver):
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", "launch", 1, "pause",
                    env=_env(LD_LIBRARY_PATH=no_prefetch_driver))
    _evict_then_regrant(world, recorder, app)
    app.paused(nth=2)
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    assert _released(recorder)[0].evict_us == 0
    app.resume()
    assert app.finish() == 0
    assert recorder.errors == []
