"""HOLD and BURSTS (native/src/gate/hold.c): a held process submits no new work until HOLD 0 or the
hold runs out, keeping its lock; a process asked for its bursts reports each one's beginning (its
first kernel launch after an idle point) and end (its next idle point) as BURST, when the client
thread sees the burst under way. Checked on the order of the mock driver's log against the frames
the recording scheduler sent and received."""

from __future__ import annotations

import time

from xpushare.wire.protocol import Bursts, Hold, MessageType

from .harness import poll

STEPS = ("init", "ctx", 0, "stream", "launch", 2, "streamsync", "pause", "launch", 3, "streamsync")


def _held(app, n: int = 1):
    poll(lambda: app.stderr().count("held for at most") >= n, 10, what="the HOLD applied")


def _launches_after(world, app, t_ns: int) -> list[dict]:
    return [e for e in world.log.entries(app.pid, fn="cuLaunchKernel") if e["t0"] >= t_ns]


def test_a_held_process_launches_nothing_until_the_hold_is_lifted(world, recorder):
    app = world.app(*STEPS, env={"NVSHARE_IDLE_RELEASE_MS": 0, "NVSHARE_DEBUG": 1})
    app.paused()
    recorder.send_to(Hold(0, 20_000_000))  # 20 s: only HOLD 0 ends it within the test
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    _held(app)
    resumed = time.monotonic_ns()
    app.resume()
    time.sleep(0.3)   # the app's next launch is blocked at the gate meanwhile
    assert not _launches_after(world, app, resumed)
    recorder.send_to(Hold(0, 0))
    lifted = recorder.sent_messages(MessageType.HOLD)[-1].at_ns
    assert app.finish(20) == 0, app.stderr()
    later = [e for e in world.log.entries(app.pid, fn="cuLaunchKernel")]
    assert len(later) == 5
    assert all(e["t0"] >= lifted for e in later[2:]), (lifted, [e["t0"] for e in later])
    # the lock was never given up or asked for again: a hold is not a switch
    assert len(recorder.messages(MessageType.REQ_LOCK)) == 1
    assert not recorder.messages(MessageType.LOCK_RELEASED)
    assert "held for at most 20000.000 ms" in app.stderr() and "hold lifted" in app.stderr()


def test_a_hold_runs_out_by_itself(world, recorder):
    app = world.app(*STEPS, env={"NVSHARE_IDLE_RELEASE_MS": 0, "NVSHARE_DEBUG": 1})
    app.paused()
    recorder.send_to(Hold(0, 400_000))  # 0.4 s, and no HOLD 0 ever
    sent = recorder.sent_messages(MessageType.HOLD)[-1].at_ns
    _held(app)
    app.resume()
    assert app.finish(20) == 0, app.stderr()
    launches = world.log.entries(app.pid, fn="cuLaunchKernel")
    assert len(launches) == 5 and min(e["t0"] for e in launches[2:]) >= sent + 400_000_000
    assert "hold ran out" in app.stderr()


def test_bursts_are_reported_only_when_asked_for(world, recorder):
    steps = ("init", "ctx", 0, "stream", "launch", 2, "streamsync", "pause",
             "launch", 3, "streamsync", "sleep", 50, "launch", 2, "ctxsync", "sleep", 50,
             "call", "cuMemcpyHtoDAsync_v2", "streamsync", "sleep", 50)
    # Each kernel takes 30 ms of the mock GPU's time: a burst lasts long enough for the client
    # thread to see it under way (one that ends before its next round is not reported: it is over).
    app = world.app(*steps, env={"NVSHARE_IDLE_RELEASE_MS": 0, "MOCK_CUDA_KERNEL_US": 30_000})
    app.paused()
    assert not recorder.messages(MessageType.BURST)  # not asked: nothing reported
    recorder.send_to(Bursts(0, 1))
    time.sleep(0.05)
    asked = recorder.sent_messages(MessageType.BURSTS)[-1].at_ns
    app.resume()
    assert app.finish(20) == 0, app.stderr()
    bursts = recorder.messages(MessageType.BURST)
    # two bursts (the copy alone opens none), each begun after a launch and ended after its sync
    assert [b.msg.active for b in bursts] == [1, 0, 1, 0], bursts
    launches = [e for e in world.log.entries(app.pid, fn="cuLaunchKernel") if e["t0"] >= asked]
    syncs = [e for e in world.log.entries(app.pid) if e["t0"] >= asked
             and e["fn"] in ("cuStreamSynchronize", "cuCtxSynchronize")]
    assert len(launches) == 5 and len(syncs) == 3
    # BURST 1 leaves before the launch it comes from returns (its span opens first), and the
    # BURST 0 after the synchronisation that found the work done
    assert asked <= bursts[0].at_ns <= syncs[0]["t1"] <= bursts[1].at_ns
    assert bursts[1].at_ns <= bursts[2].at_ns <= syncs[1]["t1"] <= bursts[3].at_ns
