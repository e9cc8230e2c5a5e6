"""One read, one write: the frames a read of a connection carries are answered in one write to it
(Conn.cork). Each reply was a write of its own: a system call and a wake-up of the peer per frame,
and in a fuzzing run (a HELLO, an ATTACH and a bad frame per connection, forty control requests a
read) those wake-ups on two shared cores were where the scheduler's loop waited while a
well-behaved client's lock request was pending (docs/benchmarks.md, fuzzing)."""

import asyncio
import logging
import socket
from pathlib import Path

from sched_harness import GiB, uuid
from test_sched_register_cost import SocketTransport
from xpushare.scheduler.node.state import SchedulerState
from xpushare.scheduler.shell.connection import Connection
from xpushare.scheduler.shell.server import Config
from xpushare.wire.protocol import (
    Attach, FrameDecoder, Hello, LockRequest, MessageType, Released, encode, encode_json,
)


class CountingTransport(SocketTransport):
    def __init__(self, sock):
        super().__init__(sock)
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        super().write(data)


def _types(data: bytes) -> list[MessageType]:
    d = FrameDecoder()
    d.feed(data)
    return [f.type for f in d.frames()]


def _run(body):
    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock"), mode="serial"), [])
    socks = []

    def connect() -> tuple[Connection, CountingTransport]:
        a, b = socket.socketpair(socket.AF_UNIX)
        socks.extend((a, b))
        transport = CountingTransport(a)
        conn = Connection(state)
        conn.connection_made(transport)
        return conn, transport

    async def run():
        state.registry.start(asyncio.get_running_loop())
        try:
            return body(connect)
        finally:
            for s in socks:
                s.close()
    return asyncio.run(run())


def test_hello_attach_and_a_bad_frame_in_one_read_are_answered_in_one_write(caplog):
    caplog.set_level(logging.CRITICAL)

    def body(connect):
        conn, t = connect()
        conn.data_received(encode(Hello(0, 0, "", "")) + encode(Attach(0, 0, uuid(0), "GPU", GiB, GiB))
                           + b"\xff" * 16)
        return t
    t = _run(body)
    assert len(t.writes) == 1, [_types(w) for w in t.writes]
    assert _types(t.writes[0]) == [MessageType.WELCOME, MessageType.ATTACHED, MessageType.ERROR]
    assert t.closed


def test_forty_control_requests_in_one_read_are_answered_in_one_write():
    def body(connect):
        conn, t = connect()
        conn.data_received(encode_json(MessageType.CTL_REQUEST, {"op": "ping"}) * 40)
        return t
    t = _run(body)
    assert len(t.writes) == 1
    assert _types(t.writes[0]) == [MessageType.CTL_REPLY] * 40


def test_a_grant_handed_on_by_a_release_is_written_before_the_releaser_s_read_ends():
    """Corking holds the reader's own output only: the next holder's LOCK_OK is not delayed."""
    def body(connect):
        holder, ht = connect()
        waiter, wt = connect()
        for c in (holder, waiter):
            c.data_received(encode(Hello(0, 0, "", "")) + encode(Attach(0, 0, uuid(0), "GPU", GiB, GiB)))
        holder.data_received(encode(LockRequest(0, 0)))
        waiter.data_received(encode(LockRequest(0, 0)))
        assert MessageType.LOCK_OK in _types(b"".join(ht.writes))
        seen = []
        real = holder.conn.uncork

        def uncork():
            seen.append(b"".join(wt.writes))  # what the waiter had been written when the read ended
            real()
        holder.conn.uncork = uncork
        holder.data_received(encode(Released(0, 0, 1, 2, 3)))
        return seen
    (written,) = _run(body)
    assert MessageType.LOCK_OK in _types(written)
