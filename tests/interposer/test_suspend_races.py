"""The scheduler's side of a suspension when two things happen at once (src/xpushare/scheduler/node/
suspend.py): two resumes asked in one loop turn restore the client once; a resume the checkpoint
worker will not retry (suspension off here) is given up and said, not tried forever; a call of the
application that passed its suspension check just before the suspension began still gets to
run (the library's side, native/src/gate/gate.c). Fake clients
and the mock's test program play the library; the mock driver's checkpoint calls run in the
scheduler's worker."""

from __future__ import annotations

import os

from sched_harness import FakeClient, uuid
from testkit.waiting import poll
from xpushare.wire.protocol import (
    HELLO_MOVE, HELLO_SUSPEND, HELLO_SWAP, MessageType, ResumeRequest, SuspendReady, SuspendStatus,
    encode, encode_json,
)

from .test_suspend import _app, _idle, _phase, _scheduler

MIB = 1 << 20


def _suspendable(sched) -> FakeClient:
    c = FakeClient(sched.socket)
    c.hello(flags=HELLO_SUSPEND | HELLO_MOVE | HELLO_SWAP)
    c.attach(0, uuid(0))
    c.mem_update(0, other=64 * MIB)
    return c


def _view(sched, c) -> dict:
    return next(x for x in sched.status()["clients"] if x["client_id"] == c.client_id)["suspend"]


def _suspend(sched, admin, c) -> None:
    admin.ctl("suspend", client_id=c.client_id)
    c.expect(MessageType.SUSPEND)
    c.residency(0, resident=0, host=64 * MIB)
    c.send_raw(encode(SuspendReady(int(SuspendStatus.READY), 0)))
    poll(lambda: _view(sched, c)["phase"] == "suspended", 10, what="suspended")


def test_a_resume_request_and_nvsharectl_resume_together_restore_it_once(world):
    """Both in one read: the scheduler handles them in one loop turn, before the first restore's
    task has run; the second must find the client resuming already."""
    sched = _scheduler(world)
    c, admin = _suspendable(sched), FakeClient(sched.socket)
    for n in range(1, 4):
        _suspend(sched, admin, c)
        c.send_raw(encode(ResumeRequest(0, 0)) +
                   encode_json(MessageType.CTL_REQUEST, {"op": "resume", "client_id": c.client_id}))
        got = sorted(c.recv(timeout=10).type.name for _ in range(2))
        assert got == ["CTL_REPLY", "RESUMED"]
        assert sched.log().count(f"resume pid={os.getpid()} ") == n, "one restore started per suspension"
        poll(lambda: _view(sched, c)["phase"] is None, 10, what="resumed")
        assert _view(sched, c)["resumes"] == n


def test_a_resume_the_worker_will_not_retry_is_given_up_and_said(world):
    """Suspended under one scheduler, reconnected to one with --no-suspend: its restore cannot be
    done here, and is not tried again and again; status says why, and nvsharectl resume tries."""
    sched = _scheduler(world)
    app = _app(world)
    _idle(sched, app.pid)
    assert sched.ctl("suspend", pid=app.pid)["clients"][0]["suspending"]
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended")
    sched.kill()
    off = _scheduler(world, "--no-suspend")
    poll(lambda: off.client(app.pid) is not None, 15, what="reconnected")
    app.resume()  # its next call asks to run
    poll(lambda: (off.client(app.pid)["suspend"] or {}).get("resume_failed"), 15, what="given up")
    view = off.client(app.pid)["suspend"]
    assert view["phase"] == "suspended" and "suspension is off" in view["resume_failed"]
    assert "trying again" not in off.log() and off.log().count("failed: suspension is off") == 1
    # the first scheduler's checkpoint holds it: only a scheduler that may restore it frees it
    off.stop()
    again = _scheduler(world)
    assert app.finish(timeout=20) == 0 and app.steps("check")[0]["ok"] == 1
    assert f"resumed pid={app.pid} " in again.log()


def test_a_call_between_its_suspension_check_and_the_gate_asks_to_run(world, tmp_path):
    """The application's read passed the suspension check, then the suspension round ran (it saw
    no lock asked for) before the read reached the gate: a suspended client asks for no lock, so
    the read must ask to run as the check would have, or wait forever."""
    sched = _scheduler(world)
    hold = tmp_path / "hold"
    app = _app(world, env_extra={"MOCK_CUDA_CTX_HOLD_FILE": str(hold)})
    _idle(sched, app.pid)
    hold.touch()
    app.resume()  # its next step, a read (gated), held inside the gate's first driver call
    poll(lambda: world.log.entries(app.pid, "mock_ctx_hold"), 10, what="the launch held")
    assert sched.ctl("suspend", pid=app.pid)["clients"][0]["suspending"]
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended")
    hold.unlink()  # the read goes on to the gate
    assert app.finish(timeout=20) == 0 and app.steps("check")[0]["ok"] == 1
    assert f"resume pid={app.pid} client=" in sched.log() and "(its application)" in sched.log()
