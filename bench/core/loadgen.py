"""Many protocol clients driven from one process, for bench/scheduling/load.py.

One thread and one epoll selector drive every connection: a thousand clients cost a thousand sockets,
not a thousand threads, and the generator stays far from using its core at the loads measured. The
frames a client sends are encoded once (MEM_UPDATE + REQ_LOCK in one write, as libnvshare.so sends a
lock request; LOCK_RELEASED), so a loop times the socket and the scheduler, not the packing.

Timestamps: time.perf_counter() (CLOCK_MONOTONIC) just before a send; for what comes back, the time
the selector returned with the connection readable. The data was there by then, so the generator's
handling of other connections ready at the same moment is not counted against the scheduler.

- register(): connect, HELLO -> WELCOME, ATTACH -> ATTACHED, one client after the other (blocking),
  every earlier client still connected; the time of each.
- closed_loop(): each client requests, releases as soon as it is granted, then thinks (uniform in
  0.5..1.5 times the think time; 0: asks again at once); REQ_LOCK sent -> LOCK_OK read per cycle.
- burst(): every client requests at once, each grant is released as soon as it is read; when each
  request was sent, each grant read and each release sent.
"""

from __future__ import annotations

import heapq
import random
import selectors
import socket
import time
from pathlib import Path

from bench.core.protoclient import GIB
from xpushare.wire.protocol import (
    HEADER, MAGIC, Attach, Grant, Hello, LockRequest, MemUpdate, MessageType, Released, encode,
)

LOCK_OK, DROP_LOCK, ERROR = int(MessageType.LOCK_OK), int(MessageType.DROP_LOCK), int(MessageType.ERROR)


class LoadFailure(RuntimeError):
    """A client was refused, got an ERROR or lost its connection, or a grant did not come in time."""


class Frames:
    """The frames of one benchmark's clients (device ordinal 0 of one GPU)."""

    def __init__(self, uuid: str, capacity: int = 16 * GIB, footprint: int = 1 << 20) -> None:
        self.hello = encode(Hello(0, 0, "", ""))
        self.attach = encode(Attach(0, 0, uuid, "load benchmark GPU", capacity, capacity))
        self.request = encode(MemUpdate(0, 0, footprint, 0)) + encode(LockRequest(0, 0))
        self.release = encode(Released(0, 0))


class Client:
    __slots__ = ("index", "sock", "buf", "t_req", "waiting")

    def __init__(self, index: int, sock: socket.socket) -> None:
        self.index, self.sock, self.buf = index, sock, bytearray()
        self.t_req = 0.0
        self.waiting = False


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One frame from a blocking socket: (type, payload)."""
    head = _read_exactly(sock, HEADER.size)
    magic, _version, mtype, length = HEADER.unpack(head)
    if magic != MAGIC:
        raise LoadFailure(f"bad frame magic {magic:#x}")
    return mtype, _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise LoadFailure("the scheduler closed the connection")
        data += chunk
    return bytes(data)


def _expect(sock: socket.socket, mtype: MessageType) -> None:
    got, payload = read_frame(sock)
    if got != mtype:
        raise LoadFailure(f"expected {mtype.name}, got {MessageType(got).name}: {payload[:200]!r}")


def register(path: Path, n: int, frames: Frames, timeout: float = 10.0) -> tuple[list[Client], list[float]]:
    """n clients, one after the other; (the clients, each one's registration time in µs). The
    sockets are left non-blocking for the selector loops."""
    clients, times = [], []
    try:
        for i in range(n):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            t0 = time.perf_counter()
            sock.connect(str(path))
            sock.sendall(frames.hello)
            _expect(sock, MessageType.WELCOME)
            sock.sendall(frames.attach)
            _expect(sock, MessageType.ATTACHED)
            times.append((time.perf_counter() - t0) * 1e6)
            sock.setblocking(False)
            clients.append(Client(i, sock))
    except BaseException:
        close(clients)
        raise
    return clients, times


def close(clients: list[Client]) -> None:
    for c in clients:
        c.sock.close()


def _frames_in(c: Client) -> list[int]:
    """Read what is there and return the types of the complete frames (an ERROR or EOF raises)."""
    try:
        data = c.sock.recv(65536)
    except BlockingIOError:
        return []
    if not data:
        raise LoadFailure(f"client {c.index}: the scheduler closed the connection")
    c.buf += data
    types = []
    while len(c.buf) >= HEADER.size:
        magic, _version, mtype, length = HEADER.unpack_from(c.buf)
        if magic != MAGIC:
            raise LoadFailure(f"client {c.index}: bad frame magic {magic:#x}")
        if len(c.buf) < HEADER.size + length:
            break
        if mtype == ERROR:
            raise LoadFailure(f"client {c.index}: scheduler error: "
                              f"{bytes(c.buf[HEADER.size:HEADER.size + length]).decode(errors='replace')}")
        types.append(mtype)
        del c.buf[:HEADER.size + length]
    return types


class _Loop:
    """The selector of a set of clients; grants(timeout) yields (time, client) per LOCK_OK."""

    def __init__(self, clients: list[Client]) -> None:
        self.sel = selectors.DefaultSelector()
        for c in clients:
            self.sel.register(c.sock, selectors.EVENT_READ, c)
        self.drops = 0

    def grants(self, timeout: float):
        events = self.sel.select(max(0.0, timeout))
        t = time.perf_counter()
        for key, _ in events:
            for mtype in _frames_in(key.data):
                if mtype == LOCK_OK:
                    yield t, key.data
                elif mtype == DROP_LOCK:  # a quantum ended: the grant is released anyway
                    self.drops += 1

    def close(self) -> None:
        self.sel.close()


def _send(c: Client, data: bytes) -> None:
    # A few dozen bytes to a socket whose peer reads everything: the buffer never fills.
    if c.sock.send(data) != len(data):
        raise LoadFailure(f"client {c.index}: short write")


def closed_loop(clients: list[Client], frames: Frames, seconds: float, think_s: float,
                seed: int = 1) -> dict:
    """Cycles for `seconds`, then the grants still due are collected (and not counted)."""
    rng = random.Random(seed)
    loop = _Loop(clients)
    rtts: list[float] = []
    start = time.perf_counter()
    end = start + seconds
    due = [(start + rng.uniform(0, think_s), c.index) for c in clients]  # spread the first requests
    heapq.heapify(due)
    try:
        while True:
            now = time.perf_counter()
            while due and due[0][0] <= now and now < end:
                _, i = heapq.heappop(due)
                c = clients[i]
                c.waiting, c.t_req = True, time.perf_counter()
                _send(c, frames.request)
            if now >= end:
                break
            for t, c in loop.grants(min(end, due[0][0] if due else end) - now):
                _released(c, frames)
                rtts.append((t - c.t_req) * 1e6)
                heapq.heappush(due, (t + think_s * rng.uniform(0.5, 1.5), c.index))
        late = _collect(loop, clients, frames)
    finally:
        loop.close()
    return {"rtt_us": rtts, "seconds": time.perf_counter() - start, "late": late, "drops": loop.drops}


def back_to_back(c: Client, frames: Frames, seconds: float) -> dict:
    """One client asking again as soon as it released, for `seconds`, reading its grant on a
    blocking socket as the library's client thread does: per cycle one write (MEM_UPDATE +
    REQ_LOCK), one read of LOCK_OK's bytes, one write (LOCK_RELEASED), the very calls of the raw
    socket baseline. (The selector loop of closed_loop adds a poll and its own cost per cycle,
    which is the generator's, not the scheduler's.) Returns closed_loop's dict."""
    grant = HEADER.size + Grant.SIZE
    view = memoryview(bytearray(grant))
    rtts: list[float] = []
    c.sock.setblocking(True)
    start = time.perf_counter()
    end = start + seconds
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                break
            c.sock.sendall(frames.request)
            got = 0
            while got < grant:
                n = c.sock.recv_into(view[got:])
                if not n:
                    raise LoadFailure(f"client {c.index}: the scheduler closed the connection")
                got += n
            t1 = time.perf_counter()
            mtype = HEADER.unpack_from(view)[2]
            if mtype != LOCK_OK:  # a lone client is sent nothing else
                raise LoadFailure(f"client {c.index}: expected LOCK_OK, got message type {mtype}")
            c.sock.sendall(frames.release)
            rtts.append((t1 - t0) * 1e6)
    finally:
        c.sock.setblocking(False)
    return {"rtt_us": rtts, "seconds": time.perf_counter() - start, "late": 0, "drops": 0}


def _released(c: Client, frames: Frames) -> None:
    if not c.waiting:
        raise LoadFailure(f"client {c.index}: LOCK_OK without a request")
    c.waiting = False
    _send(c, frames.release)


def _collect(loop: _Loop, clients: list[Client], frames: Frames, timeout: float = 10.0) -> int:
    """Release the grants of the requests still open at the end of a loop; how many there were."""
    open_now = sum(c.waiting for c in clients)
    deadline = time.perf_counter() + timeout
    while any(c.waiting for c in clients):
        if time.perf_counter() > deadline:
            raise LoadFailure(f"{sum(c.waiting for c in clients)} requests not granted {timeout:.0f} s "
                              "after the loop ended")
        for _, c in loop.grants(0.1):
            _released(c, frames)
    return open_now


def burst(clients: list[Client], frames: Frames, timeout: float = 120.0) -> dict:
    """Every client requests (in index order, all sent before any grant is read), each grant is
    released as soon as it is read. Times in µs from the first request: "requested" and "granted" per
    client index, "released" per grant in the order read, "order" the client indexes in that order."""
    loop = _Loop(clients)
    requested, granted = [0.0] * len(clients), [0.0] * len(clients)
    released, order = [], []
    try:
        t0 = time.perf_counter()
        for c in clients:
            c.waiting, c.t_req = True, time.perf_counter()
            requested[c.index] = (c.t_req - t0) * 1e6
            _send(c, frames.request)
        deadline = t0 + timeout
        while len(order) < len(clients):
            if time.perf_counter() > deadline:
                raise LoadFailure(f"only {len(order)} of {len(clients)} requests granted in {timeout:.0f} s")
            for t, c in loop.grants(0.5):
                granted[c.index] = (t - t0) * 1e6
                order.append(c.index)
                released.append((time.perf_counter() - t0) * 1e6)
                _released(c, frames)
    finally:
        loop.close()
    return {"requested_us": requested, "granted_us": granted, "released_us": released, "order": order,
            "drops": loop.drops}
