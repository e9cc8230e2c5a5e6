"""A small blocking client of the XPUShare wire protocol (docs/protocol.md), for benchmarks.

It speaks for a process that is not a GPU program: HELLO (with a priority), ATTACH of a GPU by UUID,
MEM_UPDATE, REQ_LOCK, LOCK_OK, LOCK_RELEASED, the way libnvshare.so does, so that a benchmark can
play a second client (e.g. a high-priority job whose footprint does not fit beside a real one) or
time the scheduler itself. Frames are built with xpushare.wire.protocol; the ones sent in a timed loop
are encoded once, so a measurement times the socket and the scheduler, not the packing.

    with ProtoClient(sock, priority=10) as c:
        c.attach("GPU-...", capacity=14 << 30)
        c.mem_update(12 << 30)
        grant = c.lock()          # REQ_LOCK, then waits for LOCK_OK
        c.release()

`ctl(sock, "status")` sends one control request on a connection of its own (a control connection
never sends HELLO).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

try:
    import xpushare  # noqa: F401
except ImportError:  # a checkout without `pip install .`: the package sources are in src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from xpushare.cli.client import CtlClient, connect  # noqa: E402
from xpushare.wire.protocol import (  # noqa: E402
    GRANT_PREFETCH, Attach, Attached, DropLock, Frame, FrameDecoder, Grant, Hello,
    LockRequest, MemUpdate, MessageType, Released, Welcome, encode,
)

GIB = 1 << 30


def children_can_import_xpushare() -> None:
    """When xpushare is used from the source tree (not installed), put it on PYTHONPATH so that the
    processes a benchmark starts (the scheduler) find it too."""
    import xpushare

    src = Path(xpushare.__file__).resolve().parents[1]
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src == Path(__file__).resolve().parents[2] / "src" and str(src) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(src), *paths])


class ProtocolFailure(RuntimeError):
    """The scheduler answered something else than the protocol says, or closed the connection."""


class ProtoClient:
    """One client connection: HELLO on connect, then blocking lock exchanges for one device."""

    def __init__(self, sock_path: Path | str, priority: int = 0, timeout: float = 10.0,
                 pod_name: str = "", pod_namespace: str = "") -> None:
        self.sock_path = Path(sock_path)
        self.timeout = timeout
        self.sock = connect(sock_path, timeout)
        self._decoder = FrameDecoder()
        self.device = 0
        self.held = False
        self.last_drop: DropLock | None = None  # the last DROP_LOCK seen while waiting for something
        try:
            self.sock.sendall(encode(Hello(0, priority, pod_name, pod_namespace)))
            welcome = self.expect(MessageType.WELCOME)
        except BaseException:
            self.sock.close()
            raise
        assert isinstance(welcome, Welcome)
        self.client_id = welcome.client_id
        self.priority = priority
        self._req_frame = encode(LockRequest(0, 0))
        self._release_frame = encode(Released(0, 0))

    # -- framing ---------------------------------------------------------------------------------
    def recv(self, timeout: float | None = None) -> Frame:
        """The next frame; ProtocolFailure on EOF, TimeoutError when nothing comes in time."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        while (frame := self._decoder.next_frame()) is None:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError(f"nothing from the scheduler within {self.sock.gettimeout():.1f}s") from None
            if not data:
                raise ProtocolFailure("the scheduler closed the connection")
            self._decoder.feed(data)
        if frame.type == MessageType.ERROR:
            raise ProtocolFailure(f"scheduler error: {frame.decode()}")
        return frame

    def expect(self, msg_type: MessageType, timeout: float | None = None):
        frame = self.recv(timeout)
        if frame.type != msg_type:
            raise ProtocolFailure(f"expected {msg_type.name}, got {frame.type.name}: {frame.decode()}")
        return frame.decode()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    # -- protocol steps ------------------------------------------------------------------------
    def attach(self, uuid: str, device: int = 0, name: str = "benchmark client",
               capacity: int = 16 * GIB, physical_memory: int | None = None) -> Attached:
        """ATTACH the GPU `uuid` as this client's `device` ordinal; lock steps use that ordinal."""
        self.send(encode(Attach(device, 0, uuid, name, physical_memory or capacity, capacity)))
        attached = self.expect(MessageType.ATTACHED)
        self.device = device
        self._req_frame = encode(LockRequest(device, 0))
        self._release_frame = encode(Released(device, 0))
        return attached

    def mem_update_frame(self, managed_bytes: int, other_bytes: int = 0) -> bytes:
        return encode(MemUpdate(self.device, 0, managed_bytes, other_bytes))

    def mem_update(self, managed_bytes: int, other_bytes: int = 0) -> None:
        self.send(self.mem_update_frame(managed_bytes, other_bytes))

    def request(self, prefix: bytes = b"") -> None:
        """REQ_LOCK (after `prefix`, e.g. a MEM_UPDATE frame, in the same write as the library does)."""
        self.send(prefix + self._req_frame)

    def wait_grant(self, timeout: float | None = None) -> Grant:
        """Wait for LOCK_OK. A DROP_LOCK meanwhile (for a lock held before) is remembered in
        last_drop and skipped; anything else is a protocol failure."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self.recv(max(0.001, deadline - time.monotonic()))
            if frame.type == MessageType.LOCK_OK:
                self.held = True
                return frame.decode()
            if frame.type == MessageType.DROP_LOCK:
                self.last_drop = frame.decode()
                continue
            raise ProtocolFailure(f"expected LOCK_OK, got {frame.type.name}: {frame.decode()}")

    def lock(self, timeout: float | None = None, prefix: bytes = b"") -> Grant:
        self.request(prefix)
        return self.wait_grant(timeout)

    def release(self, reason: int = 0, drain_us: int = 0, evict_us: int = 0, prefetch_us: int = 0) -> None:
        """LOCK_RELEASED (no answer comes)."""
        if (drain_us, evict_us, prefetch_us) == (0, 0, 0) and reason == 0:
            self.send(self._release_frame)
        else:
            self.send(encode(Released(self.device, reason, drain_us, evict_us, prefetch_us)))
        self.held = False

    def wait_drop(self, timeout: float | None = None) -> DropLock:
        return self.expect(MessageType.DROP_LOCK, timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> ProtoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prefetch_requested(grant: Grant) -> bool:
    return bool(grant.flags & GRANT_PREFETCH)


def ctl(sock_path: Path | str, op: str, timeout: float = 10.0, **fields) -> dict:
    """One control request (status, ping, set_mode, ...) on its own connection; the reply dict."""
    with CtlClient(sock_path, timeout) as client:
        return client.request(op, **fields)


def client_gpus(status: dict, pid: int) -> list[dict]:
    """The GPUs (status "clients"[].gpus entries) of the connections of process `pid`."""
    return [g for c in status.get("clients", []) if c.get("pid") == pid for g in c.get("gpus", [])]


def footprint(gpu_entry: dict) -> int:
    """managed + other bytes of one status "clients"[].gpus entry."""
    return int(gpu_entry.get("managed_bytes") or 0) + int(gpu_entry.get("other_bytes") or 0)
