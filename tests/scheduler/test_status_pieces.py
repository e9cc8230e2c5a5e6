"""A status reply of megabytes is written a piece a step (Conn.send_pieces), never joined and
written in one turn of the loop: an admin's reply of 255 clients on 20 GPUs (2 MB) was joined
(1.6-1.8 ms of CPU on the 2-core machine) and written (2-3 ms) in one slice, the longest the loop
was held by the scheduler's own work in the status load (docs/benchmarks.md). What is sent to the
connection meanwhile comes after the whole frame."""

import asyncio
import os

from ctl_state import FakeTransport
from test_status_many import _node_of
from xpushare.scheduler.node import slicer
from xpushare.scheduler.shell import handlers
from xpushare.scheduler.shell.connection import Conn
from xpushare.wire.protocol import FrameDecoder, MessageType, encode_json

MARKER = encode_json(MessageType.CTL_REPLY, {"ok": True, "marker": 1})


class RecordingTransport(FakeTransport):
    def __init__(self, loop, conn_of):
        super().__init__()
        self.loop, self.conn_of, self.writes = loop, conn_of, []

    def write(self, data: bytes) -> None:
        if not self.writes:  # the frame begins: a frame for it from elsewhere, at the next turn
            self.loop.call_soon(lambda: self.conn_of().send(MARKER))
        self.writes.append(data)
        super().write(data)


def test_a_large_status_reply_is_written_a_piece_a_step_and_what_comes_meanwhile_after_it(monkeypatch):
    monkeypatch.setattr(slicer, "SLICE_S", 0.0)  # a step a turn of the loop

    async def run():
        loop = asyncio.get_running_loop()
        state = _node_of(loop, 255, 20)
        conn = None
        transport = RecordingTransport(loop, lambda: conn)
        conn = Conn(state.next_id(), transport, os.getpid(), 0, 0)
        state.connected(conn)
        handlers.on_ctl(state, conn, {"op": "status"})
        while conn.awaiting:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        return transport

    transport = asyncio.run(run())
    decoder = FrameDecoder(replies=True)
    decoder.feed(transport.data)
    reply, marker = decoder.frames()
    assert reply.decode()["ok"] and len(transport.data) > 1 << 20
    assert marker.decode() == {"ok": True, "marker": 1}
    assert transport.writes[-1] == MARKER and len(transport.writes) > 3  # sent after the first piece
    assert max(map(len, transport.writes)) < 512 << 10, [len(w) for w in transport.writes]
