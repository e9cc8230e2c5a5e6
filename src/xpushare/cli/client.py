"""The client side of the wire protocol (docs/protocol.md), blocking: connect to a scheduler socket,
probe whether one answers, read one frame, and the control client that nvsharectl, nvshare-run and
the tests use. protocol.py defines the frames themselves."""

from __future__ import annotations

import socket

from ..wire.paths import client_socket_candidates, socket_trusted
from ..wire.protocol import (
    Frame, FrameDecoder, MessageType, ProtocolError, encode_json,
)


class SchedulerUnavailable(Exception):
    """No scheduler answers at the socket."""


class UntrustedSocket(SchedulerUnavailable):
    """The socket or its directory belongs to someone clients must not trust (paths.socket_trusted):
    whoever listens there could show made-up state and would see every request."""


def connect(path, timeout: float = 5.0) -> socket.socket:
    """Connect to a scheduler socket; SchedulerUnavailable if nobody listens there.

    PermissionError (the socket or its directory is not accessible) is passed through, naming
    the path (connect's own names none).
    """
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as e:
        s.close()
        raise SchedulerUnavailable(f"no scheduler at {path}: {e.strerror}") from None
    except PermissionError as e:
        s.close()
        raise PermissionError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        s.close()
        raise
    return s


def socket_answers(path, timeout: float = 1.0) -> bool:
    try:
        connect(path, timeout).close()
        return True
    except (SchedulerUnavailable, OSError):
        return False


def read_frame(sock: socket.socket, decoder: FrameDecoder | None = None) -> Frame:
    """Read one frame from a blocking socket; ConnectionError on EOF."""
    decoder = decoder or FrameDecoder(replies=True)
    while (frame := decoder.next_frame()) is None:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("scheduler closed the connection")
        decoder.feed(data)
    return frame


class CtlClient:
    """Blocking CTL_REQUEST/CTL_REPLY exchanges over one connection."""

    def __init__(self, path, timeout: float = 5.0):
        self.path = path
        why = socket_trusted(path)
        if why:
            raise UntrustedSocket(f"not using the scheduler socket {path}: {why}")
        self.sock = connect(path, timeout)
        self._decoder = FrameDecoder(replies=True)

    def request(self, op: str, **fields) -> dict:
        self.sock.sendall(encode_json(MessageType.CTL_REQUEST, {"op": op, **fields}))
        frame = read_frame(self.sock, self._decoder)
        if frame.type == MessageType.ERROR:
            return {"ok": False, "error": frame.decode()}
        if frame.type != MessageType.CTL_REPLY:
            raise ProtocolError(f"expected CTL_REPLY, got {frame.type.name}")
        return frame.decode()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect_ctl(explicit=None) -> CtlClient:
    """A control client on the first trusted socket of client_socket_candidates(explicit) that
    answers; SchedulerUnavailable naming every socket tried (and why one was not trusted)."""
    tried = []
    for path in client_socket_candidates(explicit):
        try:
            return CtlClient(path)
        except UntrustedSocket as e:  # say why: "no scheduler" would send the user looking
            tried.append(f"{path}, {e}")
        except SchedulerUnavailable:
            tried.append(str(path))
    raise SchedulerUnavailable(f"no scheduler is running (tried {'; '.join(tried)}); start one with "
                               "nvshare-scheduler or nvshare-run")
