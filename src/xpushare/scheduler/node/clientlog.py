"""The log lines a user's clients cause, rate-limited per uid (--client-log-limit LINES/SECONDS).

Any local user may connect, ask, attach and leave as fast as it likes, and each of those writes a
line (a refused control request, a client's HELLO, ATTACH, JOB or SETTINGS, its disconnect, its
protocol errors and timeouts, and the warnings of limits.LogLimiter a connection triggers). Those
lines go through here, under the uid that caused them: at most LINES per uid per interval of
SECONDS, which starts at its first line; past that they are counted, and when the interval ends one
WARNING says how many were suppressed. Privileged uids (root, the scheduler's own) are exempt: an
admin's changes are always in the log. The scheduler's own events (its decisions, GPUs, start and
stop) never go through here, so nothing of them is suppressed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .limits import privileged

log = logging.getLogger("nvshare.scheduler")

LINES = 100         # lines per uid per interval (default of --client-log-limit)
INTERVAL = 30.0     # seconds
_PRUNE_AT = 4096    # uids kept before the ended intervals are dropped


class _Window:
    __slots__ = ("start", "logged", "suppressed")

    def __init__(self, start: float):
        self.start, self.logged, self.suppressed = start, 0, 0


class ClientLog:
    """lines == 0: no limit."""

    def __init__(self, lines: int = LINES, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.lines, self.interval, self._clock = lines, interval, clock
        self._windows: dict[int, _Window] = {}

    def info(self, who, fmt: str, *args) -> bool:
        return self.log(logging.INFO, who, fmt, *args)

    def warning(self, who, fmt: str, *args) -> bool:
        return self.log(logging.WARNING, who, fmt, *args)

    def log(self, level: int, who, fmt: str, *args) -> bool:
        """Log fmt % args at `level` unless who's uid has used up its lines; True if logged.
        who: a connection (its uid, exempt when it is node-privileged: access.py) or a uid
        (exempt when privileged)."""
        uid, exempt = (who, privileged(who)) if isinstance(who, int) else (who.uid, who.privileged)
        if not self.lines or exempt:
            log.log(level, fmt, *args)
            return True
        now = self._clock()
        w = self._windows.get(uid)
        if w is None or now - w.start >= self.interval:
            if w is not None:
                self._end(uid, w)   # its timer has not run (no loop, or not yet)
            if len(self._windows) >= _PRUNE_AT:
                self._prune(now)
            w = self._windows[uid] = _Window(now)
        if w.logged < self.lines:
            w.logged += 1
            log.log(level, fmt, *args)
            return True
        if not w.suppressed:
            self._at_end(w.start + self.interval - now, uid, w)
        w.suppressed += 1
        return False

    def _at_end(self, delay: float, uid: int, w: _Window) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test's direct call): said at the uid's next line
        loop.call_later(max(0.0, delay), self._end, uid, w)

    def _end(self, uid: int, w: _Window) -> None:
        if self._windows.get(uid) is w:
            del self._windows[uid]
        if w.suppressed:
            log.warning("suppressed %d similar lines from uid %d in %gs (at most %d per uid)",
                        w.suppressed, uid, self.interval, self.lines)
            w.suppressed = 0

    def _prune(self, now: float) -> None:
        for uid, w in list(self._windows.items()):
            if now - w.start >= self.interval:
                self._end(uid, w)
