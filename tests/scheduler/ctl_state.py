"""An in-process SchedulerState for ops.handle(): two GPUs from NVML, two registered clients,
and a snapshot of everything a control op may change (to show that a refused one changed nothing)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sched_harness import GiB, uuid
from xpushare.wire.protocol import FrameDecoder, Hello, MessageType
from xpushare.scheduler.control import ops
from xpushare.scheduler.shell.connection import Conn
from xpushare.scheduler.node.gpus import GpuInfo
from xpushare.scheduler.node.state import Config, SchedulerState


class FakeTransport:
    """What Conn needs of an asyncio transport; `fail` makes every write raise."""

    def __init__(self, fail: bool = False):
        self.fail, self.data, self.closed = fail, b"", False

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError("write failed")
        self.data += data

    def close(self) -> None:
        self.closed = True

    def frame_types(self) -> list[MessageType]:
        d = FrameDecoder()
        d.feed(self.data)
        return [f.type for f in d.frames()]


def build_state(loop: asyncio.AbstractEventLoop) -> SchedulerState:
    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock"), tq=30),
                           [GpuInfo(0, uuid(0), "A", 16 * GiB), GpuInfo(1, uuid(1), "B", 16 * GiB)])
    state.registry.start(loop)  # only its timers are used
    gpus = state.registry.in_order()
    for cid in (1, 2):
        c = Conn(cid, FakeTransport(), 1000 + cid, os.getuid(), os.getgid())
        c.hello = Hello()
        c.devices[0] = gpus[cid - 1]
        state.conns.add(c)
        state.registry.apply(gpus[cid - 1], gpus[cid - 1].arbiter.set_priority, c, 0)
    return state


def ctl_conn() -> Conn:
    """An nvsharectl connection of our own uid (an admin)."""
    return Conn(99, FakeTransport(), os.getpid(), os.getuid(), os.getgid())


def ask(state: SchedulerState, msg) -> dict:
    """ops.handle's reply to `msg`, decoded."""
    d = FrameDecoder(replies=True)
    d.feed(ops.handle(state, ctl_conn(), msg))
    (frame,) = d.frames()
    assert frame.type == MessageType.CTL_REPLY
    return frame.decode()


def snapshot(state: SchedulerState) -> tuple:
    """Everything a control op may change."""
    r = state.registry
    return (r.default_mode, r.default_tq,
            [(g.uuid, g.arbiter.mode, g.arbiter.tq_explicit, g.capacity_override, g.capacity)
             for g in r.in_order()],
            [(c.id, c.priority) for c in state.clients()])
