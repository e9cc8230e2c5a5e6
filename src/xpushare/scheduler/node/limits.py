"""Bounds on what peers can make the scheduler hold, and the helpers that keep them.

The socket is mode 0666: any local user may connect, so nothing a peer does may grow the daemon
without bound, hold a file descriptor forever or flood its log:

- MAX_QUEUED: bytes queued to one peer that does not read. A status reply is at most
  protocol.MAX_CTL_REPLY (2 MiB), so a peer this far behind is not going to catch up; it is
  disconnected (Conn.send).
- HELLO_TIMEOUT: a new connection must complete its first message (HELLO, or nvsharectl's request)
  within it. FRAME_TIMEOUT: a connection may sit inside one partial frame that long. A client that
  has completed HELLO and sends nothing is never timed out: clients hold idle connections for hours.
- MAX_CONNECTIONS_PER_UID (--max-connections-per-uid): open connections per uid.
- MAX_MADE_UP_GPUS_PER_UID: GPUs NVML did not report that one uid's clients made known by attaching
  them (registry.py); each is forgotten when its last client leaves, and ATTACH of one more is
  refused with an ERROR and the connection is closed.
- Device ordinals per connection: a process has at most as many CUDA devices as the driver
  reports, and CUDA numbers them from 0, so an ATTACH's ordinal must be below the count of GPUs
  NVML reported plus MAX_MADE_UP_GPUS_PER_UID (room for devices NVML does not show: no NVML, MIG).
  Everything the scheduler keeps per client and GPU (memory, swap, lock counts, status and metrics
  entries) is then bounded by it; an ATTACH past it gets an ERROR and the connection is closed.
  Root too: no process of root's has more devices either.
- FD_RESERVE: when the open connections (FDS_PER_CONNECTION descriptors each) reach the
  open-file limit less this reserve, only
  privileged peers (root and the scheduler's own uid, who may also change settings) are admitted; the
  others are answered with an ERROR and closed at once. The reserve keeps `nvsharectl ping` (the
  chart's health probe, run as root) and root's clients served when everybody else has used up the
  limit. The scheduler raises its soft RLIMIT_NOFILE to the hard limit at start (raise_fd_limit).
- WARN_INTERVAL: a warning a peer can trigger again and again is logged once per interval and key
  (LogLimiter); the next line says how many were suppressed. All the lines a uid's clients cause
  are limited per uid besides (clientlog.py, --client-log-limit).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import time
from collections.abc import Callable, Hashable

log = logging.getLogger("nvshare.scheduler")

MAX_QUEUED = 4 << 20              # bytes queued to one peer
HELLO_TIMEOUT = 10.0              # seconds to complete the first message
FRAME_TIMEOUT = 10.0              # seconds inside one partial frame
MAX_CONNECTIONS_PER_UID = 256     # default of --max-connections-per-uid (0: no cap)
MAX_MADE_UP_GPUS_PER_UID = 16     # client-made GPUs one uid may have known at once (root exempt)
FD_RESERVE = 32                   # file descriptors kept for privileged peers
FDS_PER_CONNECTION = 2            # its socket and the pidfd of its process (connection.py)
WARN_INTERVAL = 60.0              # seconds between two lines of one repeated warning

_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def max_ordinals(nvml_gpus: int) -> int:
    """The device ordinals one connection may ATTACH: 0 up to this, exclusive."""
    return nvml_gpus + MAX_MADE_UP_GPUS_PER_UID


def privileged(uid: int) -> bool:
    """Root and the scheduler's own uid: exempt from the per-uid caps, admitted into the reserve."""
    return uid in (0, os.geteuid())


class LogLimiter:
    """WARNING lines, at most one per key per interval; the next line after a quiet spell says how
    many were suppressed. One limiter per connection for what its messages trigger; one in
    SchedulerState for what is keyed otherwise (a uid, the accept loop)."""

    _PRUNE_AT = 4096  # keys kept before the stale ones are dropped

    def __init__(self, interval: float = WARN_INTERVAL, clock: Callable[[], float] = time.monotonic,
                 sink: Callable[..., object] | None = None):
        self.interval, self._clock = interval, clock
        self._sink = sink or log.warning  # a connection's: its uid's ClientLog (clientlog.py)
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}

    def warning(self, key: Hashable, fmt: str, *args) -> bool:
        """Log fmt % args unless `key` was logged less than an interval ago; True if logged."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= self._PRUNE_AT:
            self._prune(now)
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            fmt += " (%d more like it in the last %gs not logged)"
            args += (suppressed, now - last)
        self._sink(fmt, *args)
        return True

    def _prune(self, now: float) -> None:
        for key in [k for k, t in self._last.items() if now - t >= self.interval]:
            del self._last[key]
            self._suppressed.pop(key, None)


class Deadline:
    """One pending deadline of a connection: `expire(what, seconds)` runs unless cancelled first.
    Re-arming replaces it; cancelling an unarmed one costs nothing."""

    def __init__(self, expire: Callable[[str, float], None]):
        self._expire = expire
        self._handle = None

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self, seconds: float, what: str) -> None:
        self.cancel()
        if seconds > 0:
            self._handle = asyncio.get_running_loop().call_later(seconds, self._fire, what, seconds)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self, what: str, seconds: float) -> None:
        self._handle = None
        self._expire(what, seconds)


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel's ceiling for NOFILE is fs.nr_open
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, e)
    log.info("open-file limit %d (hard limit %s); %d kept for root when connections use up the "
             "rest", soft, "unlimited" if hard == resource.RLIM_INFINITY else hard, FD_RESERVE)
    return soft


def open_fds() -> int:
    """File descriptors this process has open now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir used
    except OSError:
        return 16


def quiet_accept_errors(loop, limiter: LogLimiter, fd_limit: int) -> None:
    """Out of file descriptors, asyncio's accept loop reports every failed accept() with a
    traceback (about a thousand a second: it retries each in a second, once per attempt). Report
    them as one WARNING line per interval instead; every other loop error goes to the handler that
    was there. (uvloop reports none: libuv accepts a connection it has no descriptor for with a
    spare one and closes it at once, so such a peer sees EOF.)"""
    previous = loop.get_exception_handler()

    def handler(loop, context):
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FDS and \
                "accept" in context.get("message", ""):
            limiter.warning("accept", "cannot accept connections: %s (open-file limit %d); "
                            "retrying", exc.strerror, fd_limit)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
