"""WAITERS (native/src/session/inbound.c, session.c's plan_held): a holder told that nobody waits
for its GPU keeps its lock while idle; told that someone does, it gives an idle lock up at once
when it has been idle long enough, and as NVSHARE_IDLE_RELEASE_MS says after that. Checked on the
order of the frames the recording scheduler sent and received."""

from __future__ import annotations

import time

from xpushare.wire.protocol import MessageType, Waiters

from .harness import poll

STEPS = ("init", "ctx", 0, "stream", "launch", 1, "streamsync", "pause", "launch", 1, "streamsync")
ENV = {"NVSHARE_IDLE_RELEASE_MS": 20, "NVSHARE_DEBUG": 1}


def test_an_idle_lock_is_kept_while_nobody_waits_and_goes_once_someone_does(world, recorder):
    recorder.after_grant = lambda device: Waiters(device, 0)
    app = world.app(*STEPS, env=ENV)
    app.paused()
    poll(lambda: "nobody waits for it" in app.stderr(), 10, what="WAITERS 0 applied")
    time.sleep(0.3)  # idle for 15 idle-release times
    assert not recorder.messages(MessageType.LOCK_RELEASED)
    recorder.send_to(Waiters(0, 1))
    told = recorder.sent_messages(MessageType.WAITERS)[-1].at_ns
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    (released,) = recorder.messages(MessageType.LOCK_RELEASED)
    assert released.at_ns >= told and released.msg.reason == 1  # idle, given up when told
    app.resume()
    assert app.finish(20) == 0, app.stderr()
    requests = recorder.messages(MessageType.REQ_LOCK)
    assert len(requests) == 2 and requests[1].at_ns > released.at_ns  # asked again to launch


def test_a_holder_never_told_gives_an_idle_lock_up_as_before(world, recorder):
    app = world.app(*STEPS, env=ENV)
    app.paused()
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    app.resume()
    assert app.finish(20) == 0, app.stderr()
    assert "nobody waits" not in app.stderr()


def test_told_that_someone_waits_a_lock_idle_long_enough_goes_at_once(world, recorder):
    """Idle for longer than NVSHARE_IDLE_RELEASE_MS while nobody waited: WAITERS 1 releases it in
    the round that reads it, not an idle-release time later (the rounds went on sampling)."""
    recorder.after_grant = lambda device: Waiters(device, 0)
    app = world.app(*STEPS, env={**ENV, "NVSHARE_IDLE_RELEASE_MS": 1000})
    app.paused()
    poll(lambda: "nobody waits for it" in app.stderr(), 10, what="WAITERS 0 applied")
    time.sleep(1.5)
    recorder.send_to(Waiters(0, 1))
    told = recorder.sent_messages(MessageType.WAITERS)[-1].at_ns
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    (released,) = recorder.messages(MessageType.LOCK_RELEASED)
    app.resume()
    assert app.finish(20) == 0, app.stderr()
    assert released.at_ns - told < 500_000_000, "waited for another idle-release time"
