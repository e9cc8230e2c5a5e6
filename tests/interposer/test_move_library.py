"""Moving a process to another GPU, the library's side (native/src/session/suspend.c): SUSPEND with
SUSPEND_MOVE is a suspension that accepts a lock request still outstanding (an application thread
waiting at the gate) and an application thread calling in meanwhile; RESUMED with RESUMED_MOVED
makes the library read its devices' identities again before anything of the application runs, and
ATTACH device 0 as the new GPU before it asks for the lock there; its memory comes back at that grant.

The fake scheduler holds REQ_LOCKs back as the real one does during a move, and the test plays the
checkpoint worker: the mock's restore with GPU pairs writes MOCK_CUDA_CHECKPOINT_DIR/moved-<pid>,
which the target's mock applies (ordinal 0 names physical device 1 from then on); the test writes
that file itself. The mock logs every driver call with CLOCK_MONOTONIC times, as the fake
scheduler stamps its messages.
"""

from __future__ import annotations

import time

import pytest

from xpushare.wire.protocol import (
    FEATURE_SUSPEND, FEATURE_SWAP, HELLO_MOVE, HELLO_SUSPEND, RESIDENCY_ANSWER, RESUMED_MOVED,
    SUSPEND_MOVE, Grant, MessageType, Resumed, Suspend, SuspendStatus,
)

from .fake_scheduler import Received, RecordingScheduler
from .harness import poll, uuid_of

ASLEEP_S = 0.3  # how long the test leaves the process suspended: calls of it there would show


class MovingScheduler(RecordingScheduler):
    """The fake scheduler, with REQ_LOCKs held back (recorded, not granted) while `holding`."""

    def __init__(self, path):
        super().__init__(path)
        self.holding = False
        self.welcome_features = FEATURE_SWAP | FEATURE_SUSPEND

    def _handle(self, conn, n, mtype, msg):
        if mtype == MessageType.REQ_LOCK and self.holding:
            with self._mu:
                self.received.append(Received(time.monotonic(), n, mtype, msg))
            return
        super()._handle(conn, n, mtype, msg)

    def grant(self, device: int):
        self.send_to(Grant(device=device, quantum_ms=0, flags=0))

    def suspend(self, flags: int = 0) -> SuspendStatus:
        """SUSPEND; the status of the SUSPEND_READY that answers it."""
        n = len(self.messages(MessageType.SUSPEND_READY))
        self.send_to(Suspend(flags=flags))
        self.wait_count(MessageType.SUSPEND_READY, n + 1)
        return SuspendStatus(self.messages(MessageType.SUSPEND_READY)[n].msg.status)

    def last_sent(self, mtype: MessageType) -> Received:
        return self.sent_messages(mtype)[-1]


@pytest.fixture
def mover(world):
    rec = MovingScheduler(world.socket)
    yield rec
    rec.close()
    print(f"--- moving scheduler: {rec.summary()}\nerrors: {rec.errors}")


def _env(ckpt, **more) -> dict:
    """Two GPUs of one chip type; the checkpoint directory; the lock let go once idle for 50 ms."""
    return {"MOCK_CUDA_DEVICES": 2, "MOCK_CUDA_DEVICE_NAMES": "Mock H200,Mock H200",
            "MOCK_CUDA_CHECKPOINT_DIR": ckpt, "NVSHARE_IDLE_RELEASE_MS": 50, "NVSHARE_DEBUG": 1, **more}


def _waiting_app(world, mover, *thread_steps, **env):
    """An app on ordinal 0 (physical device 0 of 2, both of one type) with 3 MiB of converted memory, filled, that
    launched once and let its lock go; then its main thread reads the memory back ("checkall",
    a gated call) and waits at the gate, its REQ_LOCK held back. `thread_steps`: a second thread,
    started before, that holds a context of device 0 and waits in a pause (its app.resume())."""
    ckpt = world.dir / "ckpt"
    ckpt.mkdir()
    thread = ("thread", "{", "ctx", 0, "pause", *thread_steps, "}") if thread_steps else ()
    app = world.app("init", "ctx", 0, "alloc", "3M", "fillall", 7, "launch", 1, "pause", *thread,
                    "checkall", 7, "join", env=_env(ckpt, **env))
    app.paused()
    mover.wait_count(MessageType.LOCK_RELEASED, 1, device=0)  # idle: it let the lock go
    mover.holding = True
    app.resume()
    mover.wait_count(MessageType.REQ_LOCK, 2, device=0)  # the main thread waits at the gate
    if thread_steps:
        app.paused(nth=2)
    return app, ckpt


def _calls_between(log, pid, t0, t1):
    return [e for e in log.entries(pid) if t0 < e["t0"] < t1 or t0 < e["t1"] < t1]


def _idle_app(world, mover):
    """An app with 3 MiB of converted memory, filled, idle (its lock let go), paused before its
    "checkall"; and the checkpoint directory its mock follows."""
    ckpt = world.dir / "ckpt"
    ckpt.mkdir()
    app = world.app("init", "ctx", 0, "alloc", "3M", "fillall", 7, "launch", 1, "pause", "checkall", 7,
                    env=_env(ckpt))
    app.paused()
    mover.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    return app, ckpt


def _restored_on_gpu_1(mover, app, ckpt, flags: int):
    """The checkpoint worker's part: the process restored onto physical device 1, then RESUMED."""
    (ckpt / f"moved-{app.pid}").write_text("0 1\n\n")
    mover.send_to(Resumed(flags=flags))


def _attached_gpu_1_before_asking(mover) -> None:
    got = mover.messages()
    (again,) = [r for r in mover.messages(MessageType.ATTACH, device=0) if r.msg.uuid == uuid_of(1)]
    (request,) = [r for r in mover.messages(MessageType.REQ_LOCK, device=0)
                  if r.at > mover.last_sent(MessageType.RESUMED).at]
    assert got.index(again) < got.index(request)


def test_a_move_takes_a_waiting_client_and_it_asks_again_on_the_new_gpu(world, mover):
    hold = world.dir / "go"
    app, ckpt = _waiting_app(world, mover, "meminfo", MOCK_CUDA_HOLD_FILE=hold)
    (hello,) = mover.messages(MessageType.HELLO)
    assert hello.msg.flags & HELLO_MOVE and hello.msg.flags & HELLO_SUSPEND
    (attach,) = mover.messages(MessageType.ATTACH, device=0)
    assert attach.msg.uuid == uuid_of(0)

    assert mover.suspend() == SuspendStatus.BUSY, "a plain suspension: a request outstanding is running"

    # the move: while its memory leaves (the mock holds its cuMemRelease), the second thread calls in
    log = world.log
    mover.send_to(Suspend(flags=SUSPEND_MOVE))
    poll(lambda: log.entries(app.pid, "mock_hold"), 15, what="the swap-out under way")
    app.resume()  # the second thread's meminfo: it waits, the process being suspended
    poll(lambda: "the application wants to run" in app.stderr(), 15, what="the thread waiting")
    hold.touch()
    mover.wait_count(MessageType.SUSPEND_READY, 2)
    ready = mover.messages(MessageType.SUSPEND_READY)[1]
    assert ready.msg.status == SuspendStatus.READY, "a request outstanding and a thread calling in"
    (out,) = [r for r in mover.messages(MessageType.RESIDENCY, device=0) if r.at < ready.at]
    assert out.msg.resident_bytes == 0, "all of its memory out before READY"

    time.sleep(ASLEEP_S)  # checkpointed and restored by the scheduler meanwhile, onto physical 1
    _restored_on_gpu_1(mover, app, ckpt, RESUMED_MOVED)
    resumed = mover.last_sent(MessageType.RESUMED)
    assert _calls_between(log, app.pid, ready.at_ns, resumed.at_ns) == [], \
        "no driver call while suspended"
    assert mover.messages(MessageType.RESUME_REQ) == [], "a move does not ask to run"

    mover.wait_count(MessageType.ATTACH, 2, device=0)
    again = mover.messages(MessageType.ATTACH, device=0)[1]
    assert again.msg.uuid == uuid_of(1) and again.msg.name == attach.msg.name
    assert again.msg.physical_memory == attach.msg.physical_memory
    mover.wait_count(MessageType.REQ_LOCK, 3, device=0)
    got = mover.messages()
    request = mover.messages(MessageType.REQ_LOCK, device=0)[2]
    assert resumed.at < again.at and got.index(again) < got.index(request), "ATTACH before REQ_LOCK"
    mems = [r for r in mover.messages(MessageType.MEM_UPDATE, device=0) if r.at > resumed.at]
    assert mems and got.index(again) < got.index(mems[0]), "its footprint to the new GPU, after the ATTACH"
    assert not app.has_step("checkall"), "still waiting for the lock"

    mover.holding = False
    mover.grant(0)
    assert app.finish() == 0
    assert app.steps("checkall")[0]["ok"] == 1, "its memory came back intact on the new GPU"
    grant = mover.last_sent(MessageType.LOCK_OK)
    (alloc,) = app.steps("alloc")
    back = [e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == alloc["ptr"]]
    assert len(back) == 2 and back[1]["t0"] > grant.at_ns, "mapped back at the grant, after the move"
    # the identity read again (the mock logs its last call, the physical memory's) before anything
    first = min(_calls_between(log, app.pid, resumed.at_ns, time.monotonic_ns()), key=lambda e: e["t0"])
    assert (first["fn"], first["dev"]) == ("cuDeviceTotalMem_v2", 0), first
    (info,) = app.steps("meminfo")
    assert info["ret"] == 0 and info["t"] > resumed.at_ns


def test_an_idle_client_moved_tells_the_new_gpu_its_footprint_and_asks_when_it_runs(world, mover):
    app, ckpt = _idle_app(world, mover)
    assert mover.suspend(SUSPEND_MOVE) == SuspendStatus.READY
    _restored_on_gpu_1(mover, app, ckpt, RESUMED_MOVED)
    resumed = mover.last_sent(MessageType.RESUMED)
    mover.wait_count(MessageType.ATTACH, 2, device=0)
    again = mover.messages(MessageType.ATTACH, device=0)[1]
    assert again.msg.uuid == uuid_of(1)
    mems = poll(lambda: [r for r in mover.messages(MessageType.MEM_UPDATE, device=0) if r.at > again.at], 15,
                what="a MEM_UPDATE after the new ATTACH")
    assert mems[0].footprint == (4 << 20, 0), "its footprint, told to the new GPU unasked"
    assert [r for r in mover.messages(MessageType.REQ_LOCK) if r.at > resumed.at] == [], "nobody waits"

    app.resume()  # "checkall": a gated call asks for the lock, on the new GPU
    assert app.finish() == 0 and app.steps("checkall")[0]["ok"] == 1
    (request,) = [r for r in mover.messages(MessageType.REQ_LOCK) if r.at > resumed.at]
    assert request.at > again.at


def test_a_plain_suspension_restored_on_another_gpu_attaches_it_before_the_app_runs(world, mover):
    """The scheduler may restore a suspended process elsewhere when its application asks to run."""
    app, ckpt = _idle_app(world, mover)
    assert mover.suspend() == SuspendStatus.READY
    app.resume()  # "checkall" asks to run
    mover.wait_count(MessageType.RESUME_REQ, 1)
    _restored_on_gpu_1(mover, app, ckpt, RESUMED_MOVED)
    assert app.finish() == 0 and app.steps("checkall")[0]["ok"] == 1
    _attached_gpu_1_before_asking(mover)


def test_resumed_without_moved_keeps_the_identity_and_the_request(world, mover):
    app, _ = _waiting_app(world, mover)
    assert mover.suspend(SUSPEND_MOVE) == SuspendStatus.READY
    # the move failed after the checkpoint: restored where it was, its request given to the policy
    mover.send_to(Resumed(flags=0))
    resumed = mover.last_sent(MessageType.RESUMED)
    # an EVICT right behind it: its answer ends a round that would have asked for the lock again
    mover.evict(0)
    poll(lambda: [r for r in mover.messages(MessageType.RESIDENCY) if r.at > resumed.at
                  and r.msg.flags & RESIDENCY_ANSWER], 15, what="the EVICT answered")
    mover.holding = False
    mover.grant(0)
    assert app.finish() == 0 and app.steps("checkall")[0]["ok"] == 1
    assert [a.msg.uuid for a in mover.messages(MessageType.ATTACH)] == [uuid_of(0)], "no new ATTACH"
    assert len(mover.messages(MessageType.REQ_LOCK)) == 2, "its request stood: not asked again"
    assert [e for e in world.log.entries(app.pid, "cuDeviceTotalMem_v2") if e["t0"] > resumed.at_ns], \
        "where it is was read again, and found unchanged"


def test_a_restore_elsewhere_that_nobody_said_is_found_by_the_library(world, mover):
    """A scheduler (or its checkpoint worker) that died between a restore onto another GPU and its
    RESUMED_MOVED leaves the next one to resume the process plainly: the library still finds where
    it is, and attaches the new GPU before it asks for the lock there."""
    app, ckpt = _idle_app(world, mover)
    assert mover.suspend() == SuspendStatus.READY
    _restored_on_gpu_1(mover, app, ckpt, 0)
    app.resume()
    assert app.finish() == 0 and app.steps("checkall")[0]["ok"] == 1
    _attached_gpu_1_before_asking(mover)
