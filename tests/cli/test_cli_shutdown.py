"""Stopping a scheduler: `nvsharectl shutdown` (admins only), and --exit-when-idle, which
nvshare-run gives the schedulers it starts so that none is left running after its programs."""

import asyncio
import os
import subprocess
import sys

from ctl_state import FakeTransport, build_state
from sched_harness import FakeClient, SchedulerProcess, child_env, registered
from xpushare.scheduler.control import ops
from xpushare.scheduler.shell.connection import Conn
from xpushare.wire.protocol import FrameDecoder


def ctl(*args):
    return subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", *map(str, args)],
                          env=child_env(), capture_output=True, text=True, timeout=60)


def test_shutdown_stops_the_scheduler_and_removes_its_socket(scheduler):
    with registered(scheduler.sock) as client:
        r = ctl("--socket", scheduler.sock, "shutdown")
        assert r.returncode == 0, r.stderr
        assert "is shutting down (1 client(s) run ungated" in r.stdout
        assert scheduler.proc.wait(10) == 0
        assert client.closed_by_peer()
    assert not scheduler.sock.exists()
    log = scheduler.log()
    assert log.index("shutdown requested") < log.index("shutting down")


def _reply(state, conn, msg) -> dict:
    d = FrameDecoder(replies=True)
    d.feed(ops.handle(state, conn, msg))
    (frame,) = d.frames()
    return frame.decode()


def test_shutdown_is_an_admins():
    loop = asyncio.new_event_loop()
    try:
        state = build_state(loop)
        stops = []
        state.request_stop = lambda: stops.append("stop")
        other = Conn(98, FakeTransport(), os.getpid(), 65534, 65534)  # not root, not our uid
        reply = _reply(state, other, {"op": "shutdown"})
        assert reply["ok"] is False and reply["error"].startswith("permission denied")
        assert stops == []
        admin = Conn(99, FakeTransport(), os.getpid(), os.getuid(), os.getgid())
        assert _reply(state, admin, {"op": "shutdown"}) == {"ok": True, "clients": 2}
        assert stops == ["stop"]
    finally:
        loop.close()


def test_shutdown_without_a_scheduler_exits_1(sockdir):
    r = ctl("--socket", sockdir / "none.sock", "shutdown")
    assert r.returncode == 1 and "no scheduler" in r.stderr


def test_exit_when_idle_waits_for_the_last_connection_to_be_gone(sockdir):
    """A client stays connected for several idle times: the scheduler stays; once it is gone,
    the scheduler exits by itself (0), after saying why, and its socket goes."""
    s = SchedulerProcess(sockdir / "s.sock", ["--no-nvml", "--exit-when-idle", "0.5"]).start()
    try:
        with registered(s.sock, devices=()):
            for _ in range(3):
                try:
                    s.proc.wait(0.5)
                except subprocess.TimeoutExpired:
                    pass
                assert s.proc.poll() is None, s.log()
        assert s.proc.wait(20) == 0
        log = s.log()
        assert log.index("disconnect pid=") < log.index(
            "no connection for 0.5s: exiting (--exit-when-idle)") < log.index("shutting down")
        assert not s.sock.exists()
    finally:
        s.stop()
