"""What the kernel tells about the process at the other end of a connection: its credentials
(SO_PEERCRED), command line, supplementary groups and, on Kubernetes, its pod. Identity never comes
from what a client says about itself."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from pathlib import Path

log = logging.getLogger("nvshare.scheduler")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the peer of a connected Unix socket."""
    return _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))


def cmdline(pid: int) -> str:
    """The process's command line on one printable line ("" once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    return "".join(ch if ch.isprintable() else " " for ch in text)  # one line in logs and tables


def groups(pid: int, gid: int) -> set[int]:
    """The process's primary and supplementary groups."""
    found = {gid}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                found.update(int(g) for g in line.split()[1:])
    return found


class PodLookup:
    """pid -> pod identity through xpushare.kubernetes.podidentity, when that module is there."""

    def __init__(self):
        self._fn = None
        self._loaded = False
        self._cache: dict[int, object] = {}

    def __call__(self, pid: int):
        if not self._loaded:
            self._loaded = True
            try:
                from ..kubernetes.podidentity import pod_identity
                self._fn = pod_identity
            except ImportError:
                log.debug("pod identity: xpushare.kubernetes.podidentity not available")
        if self._fn is None:
            return None
        if pid not in self._cache:
            try:
                self._cache[pid] = self._fn(pid)
            except Exception as e:  # never let a lookup take the daemon down
                log.debug("pod identity of pid %d failed: %s", pid, e)
                self._cache[pid] = None
        return self._cache[pid]

    def forget(self, pid: int) -> None:
        self._cache.pop(pid, None)
