"""A client's identity is fixed when it connects and lives as long as the process that connected.

The attack of the hardening issue: a process connects, takes the lock, forks and exits. Its child
keeps the socket, so the scheduler used to show the dead pid as the holder (and, with pod identity
looked up by pid later, a reused pid could have been attributed to another pod)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from sched_harness import registered, uuid
from xpushare.wire.protocol import MessageType
from xpushare.scheduler.shell.connection import Connection
from xpushare.scheduler.node.state import Config, SchedulerState

HERE = Path(__file__).resolve().parent

# Connects, takes the lock, forks; the parent exits at once, the child keeps the socket and
# prints what the scheduler sends it until the scheduler closes the connection.
FORK_AND_EXIT = textwrap.dedent("""
    import os, sys
    from sched_harness import FakeClient
    from xpushare.wire.protocol import MessageType
    c = FakeClient({sock!r}, timeout=20)
    c.hello()
    c.attach(0, {gpu!r})
    c.request(0)
    c.expect(MessageType.LOCK_OK)
    print("parent", os.getpid(), flush=True)
    if os.fork():
        os._exit(0)
    frame = c.recv()
    print("child got", frame.type.name, frame.decode(), flush=True)
    print("closed", c.closed_by_peer(), flush=True)
""")


def test_a_holder_that_forks_and_exits_is_not_left_holding(scheduler):
    """The connection ends when the process that made it exits; the lock goes to the waiter."""
    waiter = registered(scheduler.sock)
    script = FORK_AND_EXIT.format(sock=str(scheduler.sock),
                                  gpu=uuid(0))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    parent = int(proc.stdout.readline().split()[1])
    waiter.request()
    # Ordering: the waiter is granted only after the connection of the exited parent is closed.
    assert waiter.expect(MessageType.LOCK_OK, timeout=10).device == 0
    out, _ = proc.communicate(timeout=20)  # the child ends when the scheduler closes its socket
    assert f"child got ERROR pid {parent}, which made this connection, has exited" in out
    assert "closed True" in out
    status = scheduler.ctl("status")
    (gpu,) = status["gpus"]
    assert [h["pid"] for h in gpu["holders"]] == [os.getpid()]
    assert parent not in [c["pid"] for c in status["clients"]]
    assert f"pid={parent} uid={os.getuid()}" in scheduler.log()
    assert "has exited but its connection is still open" in scheduler.log()
    waiter.close()


def test_a_client_that_exits_normally_is_not_reported_as_forked(scheduler):
    with registered(scheduler.sock) as c:
        c.request()
        c.expect(MessageType.LOCK_OK)
    with registered(scheduler.sock) as c:  # the first one's disconnect has been handled
        c.request()
        c.expect(MessageType.LOCK_OK)
    assert "has exited but its connection is still open" not in scheduler.log()


class _Transport:
    def __init__(self, sock):
        self.sock, self.data, self.closed = sock, b"", False

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None

    def write(self, data):
        self.data += data

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_write_buffer_size(self):
        return 0


def test_pod_and_command_are_read_when_the_process_connects():
    """A pid looked up later may name another process: the pod is looked up once, at connect."""
    looked_up = []
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX)
    try:
        state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")))

        class Pods:  # peer.PodLookup's interface
            def __call__(self, pid):
                looked_up.append(pid)
                return f"pod of {pid}"

            def own(self):
                return None
        state.pods = Pods()

        async def connect_and_close():
            conn = Connection(state)
            conn.connection_made(_Transport(ours))
            assert looked_up == [os.getpid()]
            assert conn.conn.pod == f"pod of {os.getpid()}" and conn.conn.command
            assert conn.pidfd is not None  # the process's lifetime is watched from the start
            conn.connection_lost(None)
            assert conn.pidfd is None and not state.conns
        loop.run_until_complete(connect_and_close())
    finally:
        ours.close()
        theirs.close()
        loop.close()


def test_pod_identity_root_is_the_schedulers_setting(tmp_path):
    """NVSHARE_POD_IDENTITY_ROOT (the end-to-end tests' stand-in for /) is read from the
    scheduler's environment; without it, /proc and /var/log/pods are read."""
    from xpushare.kubernetes.pod_lookup import POD_IDENTITY_ROOT_ENV, PodLookup
    uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/{'c' * 64}\n")
    (tmp_path / "var" / "log" / "pods" / f"ns_p_{uid}").mkdir(parents=True)
    pod = PodLookup({POD_IDENTITY_ROOT_ENV: str(tmp_path)})(42)
    assert (pod.uid, pod.namespace, pod.name, pod.container_id) == (uid, "ns", "p", "c" * 64)
    assert PodLookup({POD_IDENTITY_ROOT_ENV: str(tmp_path)})(43) is None   # no such pid there
    assert PodLookup({}).root is None                                      # /proc, as deployed


def test_a_long_command_line_is_read_up_to_its_first_bytes_only():
    """peer.cmdline reads the first CMDLINE_MAX bytes of /proc/PID/cmdline (status shows 256
    characters, the log 120), one printable line, whatever the process's arguments weigh."""
    from xpushare.scheduler.node import peer
    code = "import sys; print(flush=True); sys.stdin.read()"
    args = ["tab\there"] + [f"{i:03d}" + "x" * 4000 for i in range(40)]  # about 160 KiB
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        proc.stdout.readline()  # it runs (while exec sets it up, its command line reads empty)
        raw = ("\0".join([sys.executable, "-c", code, *args]) + "\0").encode()[:peer.CMDLINE_MAX]
        expected = " ".join(a.decode() for a in raw.split(b"\0") if a).replace("\t", " ")
        assert peer.cmdline(proc.pid) == expected and len(expected) <= peer.CMDLINE_MAX
        assert expected.startswith(f"{sys.executable} -c {code} tab here 000xxx")
    finally:
        proc.communicate(b"")
    assert peer.cmdline(proc.pid) == ""  # gone (and reaped)
