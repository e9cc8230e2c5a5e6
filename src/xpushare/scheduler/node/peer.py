"""What the kernel tells about the process at the other end of a connection: its credentials
(SO_PEERCRED), a handle on its lifetime (a pidfd), its command line, supplementary groups and, on
Kubernetes, its pod. Identity never comes from what a client says about itself, and it is read when
the process connects: a pid looked up later may already name another process."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
from pathlib import Path

log = logging.getLogger("nvshare.scheduler")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python names it from 3.13 on


def credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the peer of a connected Unix socket."""
    return _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))


def process_handle(sock: socket.socket, pid: int) -> int | None:
    """A pidfd of the peer process (readable once it has exited), or None where there is none.

    SO_PEERPIDFD names the very process that connected. Older kernels: pidfd_open(pid) right after
    accept, which could only name another process if the peer exited and its pid was reused in
    between. None for pid 0 (a peer in a pid namespace the scheduler cannot see) or when neither
    call works (no pidfd support, or no file descriptor left)."""
    if pid <= 0:
        return None
    with contextlib.suppress(OSError):
        fd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
        if fd >= 0:
            return fd
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


# Bytes of a command line kept: status shows 256 characters of it and the log 120. A process's
# arguments may take megabytes (ARG_MAX), and the read is on the event loop at every connect.
CMDLINE_MAX = 4096


def cmdline(pid: int) -> str:
    """The process's command line, its first CMDLINE_MAX bytes, on one printable line ("" once it
    is gone)."""
    try:
        raw = _read_head(f"/proc/{pid}/cmdline", CMDLINE_MAX)
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    if text.isprintable():  # the usual case, checked in C: no loop over characters per connect
        return text
    return "".join(ch if ch.isprintable() else " " for ch in text)  # one line in logs and tables


def _read_head(path: str, limit: int) -> bytes:
    """A /proc file's first `limit` bytes, read through its file descriptor alone: at every
    connect, where Path.read_bytes took 13 us against 5 (around the read it builds a Path and a
    buffered file object, and asks for an fstat, an lseek and an ioctl: is /proc a terminal?)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def groups(pid: int, gid: int) -> set[int]:
    """The process's primary and supplementary groups."""
    found = {gid}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                found.update(int(g) for g in line.split()[1:])
    return found


class NoPods:
    """The pod lookup of a scheduler that is told of no pods (its entry point hands it
    kubernetes.pod_lookup.PodLookup, which finds them on a Kubernetes node)."""

    def __call__(self, pid: int):
        return None

    def own(self):
        return None
