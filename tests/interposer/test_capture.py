"""CUDA graph capture in progress: the interposer counts captures (cuStreamBeginCapture*,
cuStreamEndCapture) and, while one is in progress, defers idle release and drains a device without
cuCtxSynchronize. With no capture anywhere it asks no capture questions at all.

The mock driver models what was measured on an H200: cuCtxSynchronize during another thread's
global-mode capture returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and invalidates the capture
even when the calling thread is in relaxed capture mode.
"""

import time

import pytest

from .harness import DRAIN_CALLS, poll

CAPTURE_UNSUPPORTED = 900
IDLE_RELEASE_MS = 100


def _capture_window(log, pid, begin_fn, end_fn):
    """(t1 of the capture's begin, t0 of its end) in the mock's clock."""
    (begin,) = log.entries(pid, begin_fn)
    (end,) = log.entries(pid, end_fn)
    return begin["t1"], end["t0"]


def _calls_during(log, pid, fn, window):
    return [e for e in log.entries(pid, fn) if window[0] < e["t0"] < window[1]]


@pytest.mark.parametrize("begin, ptds, lookup, begin_fn", [
    (["capture-begin", "global"], False, "linked", "cuStreamBeginCapture_v2"),
    (["capture-begin", "global"], True, "linked", "cuStreamBeginCapture_v2_ptsz"),
    (["capture-begin", "global"], False, "gpa2", "cuStreamBeginCapture_v2"),  # as the CUDA runtime
    (["capture-begin", "global"], True, "gpa2", "cuStreamBeginCapture_v2_ptsz"),
    (["capture-begin-v1"], False, "linked", "cuStreamBeginCapture"),
    (["capture-begin-v1"], True, "dlsym", "cuStreamBeginCapture_ptsz"),
    (["capture-begin-v1"], False, "gpa", "cuStreamBeginCapture"),
    (["capture-begin-tograph", "global"], False, "linked", "cuStreamBeginCaptureToGraph"),
    (["capture-begin-tograph", "global"], True, "gpa2", "cuStreamBeginCaptureToGraph_ptsz"),
], ids=lambda v: v if isinstance(v, str) else "" if isinstance(v, bool) else "-".join(v))
def test_pause_inside_a_global_capture_longer_than_the_idle_release(world, begin, ptds, lookup, begin_fn):
    """The failure seen on an H200 with torch.cuda.graph: the application paused inside a global
    capture for longer than NVSHARE_IDLE_RELEASE_MS, the idle-release drain called cuCtxSynchronize
    and the capture was invalidated. Idle release must wait for the capture to end."""
    sched = world.scheduler(mode="serial", tq=30)
    app = world.app("init", "ctx", 0, "stream", "launch", 2,
                    *begin, "launch", 3, "pause", "launch", 3, "capture-end", "graph-launch",
                    "pause", env={"NVSHARE_IDLE_RELEASE_MS": IDLE_RELEASE_MS}, ptds=ptds, lookup=lookup)
    app.paused()
    sched.wait_holder(app.pid)
    # The scenario: idle, mid-capture, far past the idle-release time. (What did not happen in that
    # time is checked below on the driver's log: no drain call at all until the capture ended.)
    time.sleep(15 * IDLE_RELEASE_MS / 1000)
    assert app.pid in sched.holders(), "released (drained) while the application was mid-capture"
    app.resume()
    app.paused(nth=2)
    assert app.wait_step(begin[0])["ret"] == 0
    assert [s["ret"] for s in app.steps("launch")] == [0, 0, 0]
    assert app.wait_step("capture-end")["ret"] == 0, "the capture was invalidated"
    assert app.wait_step("graph-launch")["ret"] == 0
    # Once the capture has ended, idle release works again.
    poll(lambda: app.pid not in sched.holders(), timeout=15, what="the idle release after the capture")
    app.resume()
    assert app.finish() == 0

    log = world.log
    end_fn = "cuStreamEndCapture_ptsz" if ptds else "cuStreamEndCapture"
    assert [e["ret"] for e in log.entries(app.pid, begin_fn)] == [0], "the begin's own variant was called"
    assert [e["ret"] for e in log.entries(app.pid, end_fn)] == [0]
    assert [e for e in log.entries(app.pid) if e["ret"] == CAPTURE_UNSUPPORTED or e.get("error")] == []
    window = _capture_window(log, app.pid, begin_fn, end_fn)
    assert _calls_during(log, app.pid, "cuCtxSynchronize", window) == []
    assert [e["fn"] for fn in DRAIN_CALLS for e in _calls_during(log, app.pid, fn, window)] == [], \
        "drained while the application was mid-capture"
    assert log.entries(app.pid, "cuCtxSynchronize"), "the idle release after the capture drains as usual"


def test_drop_lock_during_a_capture_releases_without_invalidating_it(world):
    """The quantum ends while the holder is mid-capture and another process waits: the holder's
    drain waits on its checkpoint events only (no cuCtxSynchronize), releases the GPU, and the
    capture goes on undisturbed."""
    sched = world.scheduler(mode="serial", tq=1)
    env = {"NVSHARE_IDLE_RELEASE_MS": 60000, "NVSHARE_MAX_INFLIGHT": 8}
    a = world.app("init", "ctx", 0, "stream", "launch", 20,  # checkpoint events on this stream
                  "stream", "capture-begin", "global", "launch", 3, "pause", "launch", 3,
                  "capture-end", "graph-launch", env=env)
    a.paused()
    sched.wait_holder(a.pid)
    b = world.app("init", "ctx", 0, "launch", 2)
    assert b.finish(timeout=30) == 0, "the holder did not give the GPU up mid-capture"
    assert b.wait_step("launch")["ret"] == 0
    assert a.pid not in sched.holders()
    a.resume()
    assert a.finish(timeout=30) == 0
    assert [s["ret"] for s in a.steps("launch")] == [0, 0, 0]
    assert a.wait_step("capture-end")["ret"] == 0, "the drain invalidated the capture"
    assert a.wait_step("graph-launch")["ret"] == 0

    log = world.log
    assert [e for e in log.entries(a.pid) if e["ret"] == CAPTURE_UNSUPPORTED or e.get("error")] == []
    window = _capture_window(log, a.pid, "cuStreamBeginCapture_v2", "cuStreamEndCapture")
    assert _calls_during(log, a.pid, "cuCtxSynchronize", window) == []
    app_tids = {ln["tid"] for ln in a.lines}
    drain_waits = [e for e in _calls_during(log, a.pid, "cuEventSynchronize", window)
                   if e["tid"] not in app_tids]
    assert drain_waits and all(e["ret"] == 0 for e in drain_waits), \
        "the drain did not wait on the checkpoint events"
    wa, wb = log.work(a.pid), log.work(b.pid)
    assert max(e["t1"] for e in wa if e["t0"] < window[0]) < min(e["t0"] for e in wb)


def test_a_capture_does_not_begin_during_our_context_synchronisation(world):
    """An idle-release drain's cuCtxSynchronize (made slow here) is in progress when the application
    begins a global capture: the begin waits for it, so the two never overlap."""
    world.scheduler(mode="serial", tq=30)
    app = world.app("init", "ctx", 0, "stream", "launch", 1, "sleep", 300,
                    "capture-begin", "global", "launch", 2, "capture-end", "graph-launch", "pause",
                    env={"NVSHARE_IDLE_RELEASE_MS": IDLE_RELEASE_MS, "MOCK_CUDA_SYNC_US": 600_000})
    app.paused()
    assert app.wait_step("capture-end")["ret"] == 0
    assert app.wait_step("graph-launch")["ret"] == 0
    app.resume()
    assert app.finish() == 0
    log = world.log
    (begin,) = log.entries(app.pid, "cuStreamBeginCapture_v2")
    syncs = log.entries(app.pid, "cuCtxSynchronize")
    assert syncs, "no drain ran"
    overlapping = [e for e in syncs if e["t0"] < begin["t0"] < e["t1"]]
    assert overlapping == [], "the capture began while our cuCtxSynchronize was running"


def test_no_capture_means_no_capture_queries(world):
    """With no capture anywhere in the process, checkpoints, the wait for the lock and the drain make
    no cuStreamIsCapturing call and no capture-mode exchange."""
    sched = world.scheduler(mode="serial", tq=30)
    env = {"NVSHARE_MAX_INFLIGHT": 8, "NVSHARE_IDLE_RELEASE_MS": IDLE_RELEASE_MS}
    app = world.app("init", "ctx", 0, "stream", "alloc", "64K", "launch", 40, "call", "cuMemcpyHtoDAsync",
                    "pause", "launch", 40, env=env)
    app.paused()
    poll(lambda: app.pid not in sched.holders(), timeout=15, what="the idle release")
    app.resume()  # waits for the lock again: the slow path
    assert app.finish() == 0
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    log = world.log
    assert len(log.entries(app.pid, "cuEventRecord")) >= 80, "checkpoints did not run"
    assert [e["ret"] for e in log.entries(app.pid, "cuCtxSynchronize")][:1] == [0], "no drain ran"
    assert log.entries(app.pid, "cuStreamIsCapturing") == []
    assert log.entries(app.pid, "cuThreadExchangeStreamCaptureMode") == []


def test_captures_in_progress_still_get_the_capture_aware_path(world):
    """While another thread captures, a checkpoint asks whether its stream captures and makes its
    queries in relaxed mode (then restores the thread's mode)."""
    world.scheduler(mode="serial", tq=30)
    env = {"NVSHARE_MAX_INFLIGHT": 8, "NVSHARE_IDLE_RELEASE_MS": 60000}
    app = world.run("init", "ctx", 0, "stream", "capture-begin", "thread", "launch", 2,
                    "thread", "{", "ctx", 0, "stream", "launch", 10, "}", "join",
                    "capture-end", "graph-launch", env=env)
    assert app.wait_step("capture-end")["ret"] == 0
    assert app.wait_step("graph-launch")["ret"] == 0
    log = world.log
    window = _capture_window(log, app.pid, "cuStreamBeginCapture_v2", "cuStreamEndCapture")
    assert _calls_during(log, app.pid, "cuStreamIsCapturing", window)
    modes = [e["mode"] for e in _calls_during(log, app.pid, "cuThreadExchangeStreamCaptureMode", window)]
    assert modes and modes[0] == 2 and modes[-1] == 0, modes
    after = [e for e in log.entries(app.pid) if e["t0"] > window[1]
             and e["fn"] in ("cuStreamIsCapturing", "cuThreadExchangeStreamCaptureMode")]
    assert after == [], "the capture ended: no more capture questions"


def test_failed_or_foreign_capture_calls_leave_the_count_alone(world):
    """A begin the driver refuses (the legacy stream cannot capture) and an end without a capture
    are not counted: idle release still happens afterwards."""
    sched = world.scheduler(mode="serial", tq=30)
    app = world.app("init", "ctx", 0, "launch", 1, "nostream", "capture-begin", "global", "capture-end",
                    "pause", env={"NVSHARE_IDLE_RELEASE_MS": IDLE_RELEASE_MS})
    app.paused()
    assert app.wait_step("capture-begin")["ret"] == CAPTURE_UNSUPPORTED
    assert app.wait_step("capture-end")["ret"] != 0
    poll(lambda: app.pid not in sched.holders(), timeout=15, what="the idle release")
    app.resume()
    assert app.finish() == 0
