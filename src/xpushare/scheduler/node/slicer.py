"""Work too long to do at once on the event loop (a status reply, a /metrics answer), done a slice
at a time.

A job is a generator that yields after each small step and returns its result. Slicer runs the
oldest job's steps for up to SLICE_S, then lets the loop read and answer what came meanwhile, then
the next slice: one callback per turn of the loop however many jobs wait, so a lock request waits
for at most one slice. An urgent job (an admin's request) goes before every job that is not: other
users keeping requests outstanding (each within its uid's budget) cannot make root's wait for
all of theirs.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Generator

log = logging.getLogger("nvshare.scheduler")

SLICE_S = 0.0005  # work done per turn of the loop


class Slicer:
    """The jobs waiting, urgent ones first, oldest first."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._urgent: collections.deque = collections.deque()   # (steps, done)
        self._pending: collections.deque = collections.deque()  # (steps, done)
        self._scheduled = False

    def __len__(self) -> int:
        return len(self._urgent) + len(self._pending)

    def submit(self, loop, gen: Generator, done: Callable[[bytes | None], None],
               urgent: bool = False) -> None:
        """done(result) when the job is done; done(None) if it failed (logged)."""
        (self._urgent if urgent else self._pending).append((gen, done))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._slice, loop)

    def _slice(self, loop) -> None:
        end = self._clock() + SLICE_S
        while self._urgent or self._pending:
            queue = self._urgent or self._pending
            gen, done = queue[0]
            try:
                next(gen)
            except StopIteration as finished:
                queue.popleft()
                done(finished.value)
            except Exception:  # a bug of ours: this request fails, not the daemon
                log.exception("a sliced job failed")
                queue.popleft()
                done(None)
            if self._clock() >= end:
                break
        self._scheduled = bool(self._urgent or self._pending)
        if self._scheduled:
            loop.call_soon(self._slice, loop)
