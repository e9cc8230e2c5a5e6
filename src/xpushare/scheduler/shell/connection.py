"""One connection to the scheduler: a client process (after HELLO) or an nvsharectl session.

Connection is the asyncio protocol of one accepted socket: it reads the peer's pid/uid/gid with
SO_PEERCRED and a pidfd of the peer process when it is made, decodes frames as bytes arrive and
dispatches each through handlers.HANDLERS (message type -> handler), directly from the loop's read
callback: a lock request is answered without a task switch or a stream buffer in between. A
malformed frame, or a message that breaks the protocol's order, gets an ERROR and closes this
connection only.

The bounds of limits.py are kept here: admission (the per-uid cap, the fd reserve) before anything
else, the deadlines of the first message and of a partial frame, the cap on queued output, and one
LogLimiter per connection for the warnings its messages can trigger again and again.

Identity is fixed when the peer connects (peer.py): pid, uid, gid, command line and pod. The
connection ends when the process that made it exits, even if a child it forked still holds the
socket, so a dead pid is never shown as a holder and a reused pid never inherits a connection.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os

from ...wire.protocol import Frame, FrameDecoder, Hello, Limits, ProtocolError, encode, encode_error
from ..node import access, limits, move, peer
from . import handlers
from ..node.jobinfo import JobInfo
from ..node.metrics import LockStats
from ..node.quotas import Quota
from ..node.registry import Gpu
from ..node.state import SchedulerState
from ..node.suspend import SuspendRecord
from ..node.swap import SwapRecord

log = logging.getLogger("nvshare.scheduler")

# After the connecting process exits, how long its socket may stay open before the scheduler
# closes it: the kernel closes the socket before the pidfd turns readable, but the two events may
# reach the loop in either order, so the peer's own EOF gets this long to arrive first.
EXITED_GRACE = 0.5

# The disconnect of a client that attached no GPU: its only line, so it says who it was.
_UNATTACHED = f"disconnect pid=%d {handlers.IDENTITY}, attached no GPU: %s"


class Conn:
    """One connection and what its peer told the scheduler. `transport` is the asyncio transport
    (write, close, abort, is_closing, get_write_buffer_size)."""

    def __init__(self, cid: int, transport: asyncio.Transport, pid: int, uid: int, gid: int,
                 pod=None, client_log=None, privileged: bool = False, claims_socket: bool = False):
        self.id, self.transport, self.pid, self.uid, self.gid = cid, transport, pid, uid, gid
        self.privileged = privileged              # exempt from the per-uid caps (access.py)
        self.claims_socket = claims_socket        # came through --claims-socket (access.may_run)
        self.hello: Hello | None = None
        self.announced = False                    # its line with HELLO's fields was logged
        self.priority = 0                         # HELLO's, until set_priority changes it
        self.own_priority = 0                     # what it declared (declared.py), or set_priority's
        self.latency_env = False                  # HELLO's latency-sensitive flag, as it counts
        self.queue_bound: dict = {}               # Gpu -> the QUEUE_BOUND it was last sent (latency.py)
        self.bursts_on: set = set()               # Gpus it was sent BURSTS on for (latency.py)
        self.pin_ahead: set = set()               # Gpus it was sent PREPARE_SWAP on for (pinahead.py)
        self.held = [0, 0.0]                      # holds it was sent, and their seconds (latency.py)
        self.waiters_told: dict = {}              # Gpu -> the WAITERS it was last sent (waiters.py)
        self.ctl = False
        self.devices: dict[int, Gpu] = {}         # client ordinal -> GPU
        self.memory: dict[str, tuple[int, int]] = {}  # uuid -> (managed_bytes, other_bytes)
        self.swappable = False                    # HELLO offered SWAP: it answers EVICT
        self.swap: dict[str, SwapRecord] = {}     # uuid -> its RESIDENCY reports (swap.py)
        self.locks: dict[Gpu, LockStats] = {}     # its lock's counts per GPU, for the exporter
        self.command = peer.cmdline(pid)
        self.pod = pod                            # kubernetes.pod_lookup.PodLookup's answer at connect
        self.closed = False                       # close() was called, or the peer went away
        self.warnings = limits.LogLimiter(  # through its uid's line budget (clientlog.py)
            sink=None if client_log is None else functools.partial(client_log.warning, self))
        self.quota_env: Quota | None = None       # SETTINGS' (None: never sent, gets no LIMITS)
        self.quota_set: dict[str, tuple] = {}     # nvsharectl's for this client: field -> (value, when)
        self.quota = Quota()                      # what applies now (quotas.Quotas.refresh)
        self.quota_sent: Limits | None = None     # the last LIMITS sent
        self.job_info: JobInfo | None = None      # JOB's (None: the client named no job)
        self.admin: bool | None = None            # access.is_admin's answer, once asked
        self.awaiting = False                     # a reply is being built (handlers.on_ctl)
        self.resume = _nothing                    # read on once it is sent (Connection sets it)
        self.suspend = SuspendRecord()            # suspended whole (suspend.py)
        self.corked: list[bytes] | None = None    # its output held while one read is handled
        self.corked_bytes = 0
        self.pieces: collections.deque | None = None  # a frame being written a piece a step
        self.after_pieces: list[bytes] = []       # frames sent to it meanwhile, written after
        self.pieces_bytes = 0                     # ... both, not yet written

    def ordinal(self, gpu: Gpu) -> int:
        for dev, g in self.devices.items():  # a loop, not next(genexpr): it is on every grant
            if g is gpu:
                return dev
        raise KeyError(gpu)

    def send_per_device(self, gpu: Gpu, message) -> None:
        """message(ordinal), encoded, for each ordinal the client attached gpu under (a per-device
        state of the library is set per ordinal)."""
        for dev, g in self.devices.items():
            if g is gpu:
                self.send(encode(message(dev)))

    def gpus(self) -> set[Gpu]:
        return set(self.devices.values())

    def send(self, data: bytes) -> None:
        """Queue a frame; a peer with more than MAX_QUEUED bytes unread is disconnected instead.
        Never blocks or raises: registry.apply carries out the policy's actions through here.
        While corked (a read of its own being handled) the frame waits for uncork()."""
        transport = self.transport
        if transport.is_closing():
            return
        if not self._room_for(len(data)):
            return
        if self.pieces is not None:
            self.after_pieces.append(data)
            self.pieces_bytes += len(data)
            return
        if self.corked is not None:
            self.corked.append(data)
            self.corked_bytes += len(data)
            return
        transport.write(data)

    def _room_for(self, size: int) -> bool:
        """Whether `size` more bytes may be queued for the peer; if not, it is disconnected."""
        queued = self.transport.get_write_buffer_size() + self.corked_bytes + self.pieces_bytes
        if queued + size <= limits.MAX_QUEUED:
            return True
        log.warning("pid=%d uid=%d client=%d does not read what it is sent: %d bytes queued "
                    "for it (at most %d); closing its connection", self.pid, self.uid, self.id,
                    queued, limits.MAX_QUEUED)
        self.close()
        return False

    def send_pieces(self, pieces: list[bytes]):
        """Write one frame given as its pieces (wire.protocol.frame_pieces), a piece a step: a
        slicer job, so that a reply of megabytes is neither joined nor written in one turn of
        the loop. Whatever is sent to this connection meanwhile is written after the frame."""
        if self.transport.is_closing() or not self._room_for(sum(map(len, pieces))):
            return
        self.pieces = collections.deque(pieces)
        self.pieces_bytes = sum(map(len, pieces))
        try:
            while self.pieces and not self.transport.is_closing():
                piece = self.pieces.popleft()
                self.pieces_bytes -= len(piece)
                self.transport.write(piece)
                yield
        finally:
            after, self.pieces, self.after_pieces, self.pieces_bytes = self.after_pieces, None, [], 0
            for data in after:
                self.send(data)

    def cork(self) -> None:
        """Hold this connection's frames until uncork(): one read that carries several requests
        (a HELLO, an ATTACH and a bad frame; forty control requests) is answered with one write,
        one system call and one wake-up of the peer, where each frame cost one of each. What is
        sent to other connections meanwhile (a grant a release hands on) is written at once."""
        if self.corked is None:
            self.corked, self.corked_bytes = [], 0

    def uncork(self) -> None:
        corked, self.corked, self.corked_bytes = self.corked, None, 0
        if corked and self.pieces is not None:  # after the frame being written
            self.after_pieces.extend(corked)
            self.pieces_bytes += sum(map(len, corked))
        elif corked and not self.transport.is_closing():
            self.transport.write(corked[0] if len(corked) == 1 else b"".join(corked))

    def close(self) -> None:
        """End the connection; the scheduler then forgets the client (Connection.connection_lost).

        Data the peer does not read (a stopped process) must not hold the connection open, so a
        transport with unsent data is aborted rather than closed. What was held corked goes
        first (an ERROR saying why).
        """
        self.uncork()
        self.closed = True
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()

    def __repr__(self):
        return f"<client {self.id} pid {self.pid}>"


class Connection(asyncio.Protocol):
    """The life of one accepted socket: admission, frames in, deadlines, the peer's exit, the end.

    One Deadline: until the first message is complete, HELLO_TIMEOUT from the connect; afterwards,
    FRAME_TIMEOUT from the start of a partial frame, re-armed as frames complete and cancelled at a
    frame boundary (where an idle client waits for as long as it likes)."""

    def __init__(self, state: SchedulerState, claims_socket: bool = False):
        self.state = state
        self.claims_socket = claims_socket        # accepted on --claims-socket
        self.conn: Conn | None = None             # None: refused at admission
        self.decoder = FrameDecoder()
        self.deadline = limits.Deadline(self._timed_out)
        self.pidfd: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        state = self.state
        sock = transport.get_extra_info("socket")
        pid, uid, gid = peer.credentials(sock)
        pod = state.pods(pid)
        # nvshare-dra-plugin (the claims socket) must get through whatever GPU pods open as root
        privileged = self.claims_socket or access.node_privileged(state, uid, pod)
        refused = state.admission(uid, privileged)
        if refused is not None:
            state.warnings.warning(("refused", uid), "refusing a connection of pid=%d uid=%d: %s",
                                   pid, uid, refused)
            transport.write(encode_error(refused))
            transport.close()
            return
        self.conn = Conn(state.next_id(), transport, pid, uid, gid, pod=pod,
                         client_log=state.client_log, privileged=privileged,
                         claims_socket=self.claims_socket)
        self.conn.resume = self._resume
        state.connected(self.conn)
        self.deadline.arm(state.config.hello_timeout, "sent no HELLO or control request")
        self.pidfd = peer.process_handle(sock, pid)
        if self.pidfd is not None:
            asyncio.get_running_loop().add_reader(self.pidfd, self._process_exited)
        log.debug("connect pid=%d uid=%d client=%d", pid, uid, self.conn.id)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None or conn.closed:
            return
        conn.cork()  # what this read's frames are answered with, in one write (Conn.cork)
        try:
            self._frames_in(conn, data)
        except ProtocolError as e:
            self.state.stats.malformed += 1
            self.state.client_log.warning(conn, "pid=%d: protocol error: %s; closing its "
                                          "connection", conn.pid, e)
            self._end(conn, f"protocol error: {e}")
        except Exception:  # a bug of ours: lose this connection, not the daemon
            log.exception("pid=%d: internal error; closing its connection", conn.pid)
            self._end(conn, "internal scheduler error")
        finally:
            conn.uncork()

    def _frames_in(self, conn: Conn, data: bytes) -> None:
        decoder = self.decoder
        decoder.feed(data)
        if conn.awaiting:  # read before the pause took effect: kept for _resume
            return
        completed = 0
        for frame in decoder.frames():
            dispatch(self.state, conn, frame)
            completed += 1
            if conn.closed:
                return
            if conn.awaiting:  # the rest waits until that reply is sent (_resume)
                conn.transport.pause_reading()
                # Its request is complete, and nothing more is read until _resume, which arms
                # the deadline again for what is pending then: a reply that waits its turn
                # behind others is no peer that stopped sending.
                self.deadline.cancel()
                return
        if conn.hello is None and not conn.ctl:
            return  # the first message's deadline runs on
        if not decoder.pending:
            self.deadline.cancel()
        elif completed or not self.deadline.armed:
            self.deadline.arm(self.state.config.frame_timeout, "did not complete a frame")

    def _resume(self) -> None:
        """The reply being built was sent: the frames that came after its request, then more."""
        conn = self.conn
        if conn.closed or conn.transport.is_closing():
            return
        conn.transport.resume_reading()
        self.data_received(b"")

    def eof_received(self) -> bool:
        conn = self.conn
        if conn is not None and self.decoder.pending and not conn.closed:
            self.state.client_log.warning(conn, "pid=%d: connection closed inside a frame "
                                          "(%d bytes pending)", conn.pid, self.decoder.pending)
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.cancel()
        if self.pidfd is not None:
            asyncio.get_running_loop().remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        # No cycle is left for the collector, so that a closed connection is freed at once: the
        # deadline's callback and the connection's warnings (whose sink names it) referred back.
        self.deadline = limits.Deadline(_expired_after_close)
        if self.conn is not None:
            self.conn.resume = _nothing
            if exc is not None:
                log.debug("pid=%d: connection error: %s", self.conn.pid, exc)
            forget(self.state, self.conn)
            # what goes on in the background for it (a suspension, a move) ends at its next step
            self.conn.closed = True
            self.conn.warnings = limits.LogLimiter()

    def _end(self, conn: Conn, error: str) -> None:
        conn.send(encode_error(error))
        conn.close()

    def _timed_out(self, what: str, seconds: float) -> None:
        conn = self.conn
        self.state.client_log.warning(conn, "pid=%d uid=%d client=%d %s within %gs; closing "
                                      "its connection", conn.pid, conn.uid, conn.id, what, seconds)
        self._end(conn, f"{what} within {seconds:g}s")

    def _process_exited(self) -> None:
        """The process that connected has exited; its own close of the socket comes first, unless
        another process (a child it forked) still holds the socket: that one is not who the
        scheduler knows, so after a grace period the connection ends."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pidfd)
        loop.call_later(EXITED_GRACE, self._exited_but_open)

    def _exited_but_open(self) -> None:
        conn = self.conn
        if conn.closed or conn.transport.is_closing():
            return
        log.warning("pid=%d uid=%d client=%d has exited but its connection is still open (held "
                    "by a process it forked?); closing it", conn.pid, conn.uid, conn.id)
        self._end(conn, f"pid {conn.pid}, which made this connection, has exited")


def _nothing() -> None:
    pass


def _expired_after_close(what: str, seconds: float) -> None:
    pass


def forget(state: SchedulerState, conn: Conn) -> None:
    """The connection is gone: its locks and requests go with it, and an order moving it ends."""
    move.give_up(state, conn, "it went away", running=False)
    state.disconnected(conn)
    if conn.announced:
        held = [g.label for g in conn.gpus() if state.registry.gangs.holds(conn, g)]
        state.client_log.info(conn, "disconnect pid=%d client=%d%s", conn.pid, conn.id,
                              f" (held gpu {','.join(held)})" if held else "")
    elif conn.hello is not None:  # it attached nothing: who it was is said here (handlers.py)
        state.client_log.info(conn, _UNATTACHED, conn.pid, *handlers.identity(conn),
                              conn.command[:handlers.COMMAND_LOGGED])
    state.registry.leave(conn)


def dispatch(state: SchedulerState, conn: Conn, frame: Frame) -> None:
    handler = handlers.HANDLERS.get(frame.type)
    if handler is None:
        raise ProtocolError(f"unexpected {frame.type.name} from a client")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("pid=%d -> %s", conn.pid, frame.type.name)
    state.stats.messages[frame.type] += 1
    handler(state, conn, frame.decode())
