"""One connection to the scheduler: a client process (after HELLO) or an nvsharectl session.

serve_connection() reads the peer's pid/uid/gid with SO_PEERCRED, decodes frames incrementally and
dispatches them through handlers.HANDLERS (message type -> handler). A malformed frame, or a message
that breaks the protocol's order, gets an ERROR and closes this connection only.

The bounds of limits.py are kept here: admission (the per-uid cap, the fd reserve) before anything
else, the deadlines of the first message and of a partial frame, the cap on queued output, and one
LogLimiter per connection for the warnings its messages can trigger again and again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..protocol import Frame, FrameDecoder, Hello, ProtocolError, encode_error
from . import handlers, limits, peer
from .registry import Gpu
from .state import SchedulerState

log = logging.getLogger("nvshare.scheduler")

READ_CHUNK = 1 << 17


class Conn:
    """One connection and what its peer told the scheduler."""

    def __init__(self, cid: int, writer: asyncio.StreamWriter, pid: int, uid: int, gid: int):
        self.id, self.writer, self.pid, self.uid, self.gid = cid, writer, pid, uid, gid
        self.hello: Hello | None = None
        self.priority = 0                         # HELLO's, until set_priority changes it
        self.ctl = False
        self.devices: dict[int, Gpu] = {}         # client ordinal -> GPU
        self.memory: dict[str, tuple[int, int]] = {}  # uuid -> (managed_bytes, other_bytes)
        self.command = peer.cmdline(pid)
        self.closed = False                       # by the scheduler: close() was called
        self.warnings = limits.LogLimiter()

    def ordinal(self, gpu: Gpu) -> int:
        return next(dev for dev, g in self.devices.items() if g is gpu)

    def gpus(self) -> set[Gpu]:
        return set(self.devices.values())

    def send(self, data: bytes) -> None:
        """Queue a frame; a peer with more than MAX_QUEUED bytes unread is disconnected instead.
        Never blocks or raises: registry.apply carries out the policy's actions through here."""
        if self.writer.is_closing():
            return
        queued = self.writer.transport.get_write_buffer_size()
        if queued + len(data) > limits.MAX_QUEUED:
            log.warning("pid=%d uid=%d client=%d does not read what it is sent: %d bytes queued "
                        "for it (at most %d); closing its connection", self.pid, self.uid, self.id,
                        queued, limits.MAX_QUEUED)
            self.close()
            return
        self.writer.write(data)

    def close(self) -> None:
        """End the connection; its read loop then sees EOF and the scheduler forgets the client.

        Data the peer does not read (a stopped process) must not hold the connection open, so a
        transport with unsent data is aborted rather than closed.
        """
        self.closed = True
        transport = self.writer.transport
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            self.writer.close()

    def __repr__(self):
        return f"<client {self.id} pid {self.pid}>"


async def serve_connection(state: SchedulerState, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
    pid, uid, gid = peer.credentials(writer.get_extra_info("socket"))
    refused = state.admission(uid)
    if refused is not None:
        state.warnings.warning(("refused", uid), "refusing a connection of pid=%d uid=%d: %s",
                               pid, uid, refused)
        writer.write(encode_error(refused))
        writer.close()
        return
    conn = Conn(state.next_id(), writer, pid, uid, gid)
    state.connected(conn)
    log.debug("connect pid=%d uid=%d client=%d", pid, uid, conn.id)
    try:
        await _read_frames(state, conn, reader)
    except ProtocolError as e:
        log.warning("pid=%d: protocol error: %s; closing its connection", pid, e)
        conn.send(encode_error(f"protocol error: {e}"))
    except (ConnectionError, OSError) as e:
        log.debug("pid=%d: connection error: %s", pid, e)
    except Exception:  # a bug of ours: lose this connection, not the daemon
        log.exception("pid=%d: internal error; closing its connection", pid)
        conn.send(encode_error("internal scheduler error"))
    finally:
        forget(state, conn)
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def _read_frames(state: SchedulerState, conn: Conn, reader: asyncio.StreamReader) -> None:
    """Read and dispatch frames until EOF or until the scheduler closes the connection.

    One Deadline: until the first message is complete, HELLO_TIMEOUT from the connect; afterwards,
    FRAME_TIMEOUT from the start of a partial frame, re-armed as frames complete and cancelled at a
    frame boundary (where an idle client waits for as long as it likes)."""
    decoder = FrameDecoder()
    deadline = limits.Deadline(lambda what, seconds: _timed_out(conn, what, seconds))
    deadline.arm(state.config.hello_timeout, "sent no HELLO or control request")
    try:
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                if decoder.pending and not conn.closed:
                    log.warning("pid=%d: connection closed inside a frame (%d bytes pending)",
                                conn.pid, decoder.pending)
                return
            decoder.feed(data)
            completed = 0
            for frame in decoder.frames():
                dispatch(state, conn, frame)
                completed += 1
                if conn.closed:
                    return
            if conn.hello is None and not conn.ctl:
                continue  # the first message's deadline runs on
            if not decoder.pending:
                deadline.cancel()
            elif completed or not deadline.armed:
                deadline.arm(state.config.frame_timeout, "did not complete a frame")
    finally:
        deadline.cancel()


def _timed_out(conn: Conn, what: str, seconds: float) -> None:
    log.warning("pid=%d uid=%d client=%d %s within %gs; closing its connection", conn.pid,
                conn.uid, conn.id, what, seconds)
    conn.send(encode_error(f"{what} within {seconds:g}s"))
    conn.close()


def forget(state: SchedulerState, conn: Conn) -> None:
    """The connection is gone: its locks and requests go with it."""
    state.disconnected(conn)
    if conn.hello is not None:
        held = [g.label for g in conn.gpus() if g.arbiter.holds(conn)]
        log.info("disconnect pid=%d client=%d%s", conn.pid, conn.id,
                 f" (held gpu {','.join(held)})" if held else "")
    for gpu in conn.gpus():
        state.registry.apply(gpu, gpu.arbiter.disconnect, conn)
    if not any(c.pid == conn.pid for c in state.conns):
        state.pods.forget(conn.pid)


def dispatch(state: SchedulerState, conn: Conn, frame: Frame) -> None:
    handler = handlers.HANDLERS.get(frame.type)
    if handler is None:
        raise ProtocolError(f"unexpected {frame.type.name} from a client")
    log.debug("pid=%d -> %s", conn.pid, frame.type.name)
    handler(state, conn, frame.decode())
