"""A small in-process scheduler for the interposer tests: it speaks the protocol (docs/protocol.md)
with the real libnvshare.so, answers at once, and records every frame both ways, in order, so a
test can check what came before what and drive drops and grants (with their flags) by hand.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from xpushare.wire.protocol import (
    Attached,
    DropLock,
    DropReason,
    Evict,
    QueueBound,
    EVICT_ROOM,
    PAYLOADS,
    FrameDecoder,
    Grant,
    Limits,
    MessageType,
    ProtocolError,
    Welcome,
    encode,
)

from .harness import poll


# Messages that name a device (their payload starts with `u32 device`).
_DEVICE_TYPES = (MessageType.ATTACH, MessageType.ATTACHED, MessageType.REQ_LOCK, MessageType.LOCK_OK,
                 MessageType.DROP_LOCK, MessageType.LOCK_RELEASED, MessageType.MEM_UPDATE,
                 MessageType.EVICT, MessageType.RESIDENCY, MessageType.BURST)


@dataclass
class Received:
    at: float  # time.monotonic() when it was decoded (or sent): CLOCK_MONOTONIC, as the mock's t0/t1
    conn: int
    type: MessageType
    msg: object  # the decoded payload

    @property
    def device(self) -> int | None:
        return self.msg.device if self.type in _DEVICE_TYPES else None

    @property
    def footprint(self) -> tuple[int, int]:
        return self.msg.managed_bytes, self.msg.other_bytes

    @property
    def at_ns(self) -> int:
        return int(self.at * 1e9)


class RecordingScheduler:
    """WELCOME to HELLO, ATTACHED (no capacity opinion) to ATTACH, LOCK_OK to REQ_LOCK at once
    (quantum 0, flags `grant_flags`); DROP_LOCK only when a test asks. Records every frame it
    receives (`received`) and sends (`sent`)."""

    def __init__(self, path):
        self.grant_flags = 0  # grant.flags of the next LOCK_OKs (GRANT_PREFETCH)
        self.grant_quantum_ms = 0  # grant.quantum_ms of the next LOCK_OKs (0: none)
        self.after_grant = None  # device -> a message sent right after each LOCK_OK (WAITERS)
        self.grant_delay_s: dict[int, float] = {}  # device -> how long the next LOCK_OKs wait
        self.welcome_features = 0  # welcome.features of the next WELCOMEs (FEATURE_BUSY, FEATURE_QUOTAS)
        # the LIMITS that answers a SETTINGS (None: the settings' own compute and memory limits)
        self.limits_reply: Limits | None = None
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(16)
        self._srv.settimeout(0.2)
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._conns: list[socket.socket] = []
        self._send_mu = threading.Lock()
        self.received: list[Received] = []
        self.sent: list[Received] = []
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except OSError:
                continue
            with self._mu:
                n = len(self._conns)
                self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _send(self, conn: socket.socket, n: int, msg):
        with self._send_mu:
            # recorded before it leaves: the client may act on it before sendall returns
            with self._mu:
                self.sent.append(Received(time.monotonic(), n, _type_of(msg), msg))
            conn.sendall(encode(msg))

    def _serve(self, conn: socket.socket, n: int):
        decoder = FrameDecoder()
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            decoder.feed(data)
            try:
                for frame in decoder.frames():
                    self._handle(conn, n, frame.type, frame.decode())
            except (ProtocolError, OSError) as e:
                self.errors.append(f"connection {n}: {e}")
                break
        conn.close()

    def _handle(self, conn, n, mtype, msg):
        with self._mu:
            self.received.append(Received(time.monotonic(), n, mtype, msg))
        if mtype == MessageType.HELLO:
            self._send(conn, n, Welcome(client_id=n + 1, features=self.welcome_features))
        elif mtype == MessageType.ATTACH:
            self._send(conn, n, Attached(device=msg.device, capacity=0))
        elif mtype == MessageType.REQ_LOCK:
            delay = self.grant_delay_s.get(msg.device, 0)
            if delay:
                threading.Timer(delay, self._grant_later, (conn, n, msg.device)).start()
            else:
                self._grant(conn, n, msg.device)
        elif mtype == MessageType.SETTINGS:
            reply = self.limits_reply or Limits(compute_limit=msg.compute_limit, memory_limit=msg.memory_limit)
            self._send(conn, n, reply)

    def _grant(self, conn, n: int, device: int):
        self._send(conn, n, Grant(device=device, quantum_ms=self.grant_quantum_ms, flags=self.grant_flags))
        if self.after_grant is not None:
            self._send(conn, n, self.after_grant(device))

    def _grant_later(self, conn, n: int, device: int):
        try:
            self._grant(conn, n, device)
        except OSError as e:  # the connection went meanwhile
            self.errors.append(f"connection {n}: delayed grant: {e}")

    def limits(self, compute_limit: int = 0, memory_limit: int = 0, conn: int = -1):
        """Send LIMITS (compute per mille, memory bytes; 0 = none) on a connection."""
        with self._mu:
            c = self._conns[conn]
            n = conn if conn >= 0 else len(self._conns) + conn
        self._send(c, n, Limits(compute_limit=compute_limit, memory_limit=memory_limit))

    def drop(self, device: int, conn: int = -1, reason: DropReason = DropReason.QUANTUM, flags: int = 0,
             evict_mib: int = 0):
        """Ask the client to give the device up (it answers LOCK_RELEASED); flags: DROP_EVICT, with
        evict_mib the MiB to move at least (0: all)."""
        with self._mu:
            c = self._conns[conn]
            n = conn if conn >= 0 else len(self._conns) + conn
        self._send(c, n, DropLock(device=device, reason=reason, flags=flags, evict_mib=evict_mib))

    def send_to(self, msg, conn: int = -1):
        """Send one message (QueueBound, Hold, Bursts, PrepareSwap ...) on a connection."""
        with self._mu:
            c = self._conns[conn]
            n = conn if conn >= 0 else len(self._conns) + conn
        self._send(c, n, msg)

    def queue_bound(self, device: int, queue_us: int, conn: int = -1):
        """Send QUEUE_BOUND (0 lifts it)."""
        self.send_to(QueueBound(device=device, queue_us=queue_us), conn)

    def evict(self, device: int, conn: int = -1):
        """Ask an idle client to move its memory on the device to host (it answers RESIDENCY)."""
        with self._mu:
            c = self._conns[conn]
            n = conn if conn >= 0 else len(self._conns) + conn
        self._send(c, n, Evict(device=device, reason=EVICT_ROOM))

    def messages(self, *types: MessageType, device: int | None = None) -> list[Received]:
        with self._mu:
            got = list(self.received)
        return [r for r in got if (not types or r.type in types) and (device is None or r.device == device)]

    def sent_messages(self, *types: MessageType, device: int | None = None) -> list[Received]:
        with self._mu:
            got = list(self.sent)
        return [r for r in got if (not types or r.type in types) and (device is None or r.device == device)]

    def wait_count(self, mtype: MessageType, n: int, device: int | None = None, timeout: float = 15.0):
        return poll(lambda: len(self.messages(mtype, device=device)) >= n, timeout,
                    what=lambda: f"{n} {mtype.name} message(s) for device {device} (got {self.summary()})")

    def summary(self) -> list[str]:
        return [f"{r.type.name}({r.device})" for r in self.messages()]

    def hang_up(self, conn: int = -1):
        """Close a connection, as a scheduler that went away would (the client reconnects)."""
        with self._mu:
            c = self._conns[conn]
        c.shutdown(socket.SHUT_RDWR)

    def connections(self) -> int:
        """How many clients connected so far."""
        with self._mu:
            return len(self._conns)

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._srv.close()
        with self._mu:
            for c in self._conns:
                c.close()


def _type_of(msg) -> MessageType:
    return _TYPE_OF[type(msg)]


_TYPE_OF = {cls: t for t, cls in PAYLOADS.items()}
