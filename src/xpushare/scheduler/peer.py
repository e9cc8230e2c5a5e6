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


def cmdline(pid: int) -> str:
    """The process's command line on one printable line ("" once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    if text.isprintable():  # the usual case, checked in C: no loop over characters per connect
        return text
    return "".join(ch if ch.isprintable() else " " for ch in text)  # one line in logs and tables


def groups(pid: int, gid: int) -> set[int]:
    """The process's primary and supplementary groups."""
    found = {gid}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                found.update(int(g) for g in line.split()[1:])
    return found


# Test seam: a directory standing in for / when pod identities are read (<root>/proc/<pid>/cgroup,
# <root>/var/log/pods), so that an end-to-end test can give a local process a pod without a pod
# cgroup. It is the scheduler's own environment, which only whoever starts the scheduler sets: a
# client still cannot choose its identity. Deployments never set it (startup warns when it is set).
POD_IDENTITY_ROOT_ENV = "NVSHARE_POD_IDENTITY_ROOT"


class PodLookup:
    """pid -> pod identity through xpushare.kubernetes.podidentity, when that module is there and
    the host keeps pods' logs (a Kubernetes node), or the test seam names a root.
    Called once per connection, when it is made (Conn.pod); never cached by pid, which the kernel
    reuses."""

    def __init__(self, environ=None):
        self._fn = None
        self._loaded = False
        self._own: tuple = ()   # (the scheduler's own pod,) once looked up
        self.root = (os.environ if environ is None else environ).get(POD_IDENTITY_ROOT_ENV) or None
        if self.root is not None:
            log.warning("pod identities are read below %s (%s), not from /proc and /var/log/pods: "
                        "a test setting", self.root, POD_IDENTITY_ROOT_ENV)

    def __call__(self, pid: int):
        if not self._loaded:
            self._loaded = True
            try:
                from ..kubernetes.podidentity import DEFAULT_POD_LOG_ROOT, pod_identity
                self._fn = pod_identity
                # A pod's name comes from the kubelet's pod log directories (the chart mounts
                # them): on a host without them there are no pods to find, and no connection's
                # cgroup is read (docs/benchmarks.md, "burst registration").
                if self.root is None and not os.path.isdir(DEFAULT_POD_LOG_ROOT):
                    self._fn = None
                    log.info("pod identities: off (no %s on this host)", DEFAULT_POD_LOG_ROOT)
                if self.root is not None:
                    root = self.root
                    self._fn = lambda pid: pod_identity(
                        pid, proc_root=os.path.join(root, "proc"),
                        pod_log_root=os.path.join(root, "var", "log", "pods"))
            except ImportError:
                log.debug("pod identity: xpushare.kubernetes.podidentity not available")
        if self._fn is None or pid <= 0:
            return None
        try:
            return self._fn(pid)
        except Exception as e:  # never let a lookup take the daemon down
            log.debug("pod identity of pid %d failed: %s", pid, e)
            return None

    def own(self):
        """The scheduler's own pod (None outside one): looked up once, it does not change."""
        if not self._own:
            self._own = (self(os.getpid()),)
        return self._own[0]
