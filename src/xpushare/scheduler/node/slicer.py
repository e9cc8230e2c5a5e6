"""Work too long to do at once on the event loop (a status reply, a /metrics answer), done a slice
at a time.

A job is a generator that yields after each small step and returns its result. Slicer does up to
SLICE_S of steps per turn of the loop, then lets the loop read and answer what came meanwhile:
one callback per turn however many jobs wait, so a lock request waits for at most one slice.

Who gets a slice (each connection has at most one job: handlers.on_ctl reads nothing more from it
until its reply is sent):
- Jobs take turns, a slice each (round robin): a large job does not hold the small ones behind it
  for all of its length, and however many requests one connection sends back to back, it has one
  job in the turn at a time.
- An urgent job (an admin's request) gets every other slice while other jobs wait, and all of them
  while none does: twenty users keeping requests outstanding cannot make root's reply wait for all
  of theirs, and an admin asking in a loop cannot stop theirs either (they get the other half).

The next slice is a timer due at once, not a call_soon: asyncio's loop appends the I/O callbacks
of a turn to its ready queue before the timers due, so a lock request read in the same poll is
handled (and granted) before the slice, where a call_soon made in the turn before ran first.
(uvloop makes a timer due at once a call_soon, which it runs after its poll: the same order.)
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Generator

log = logging.getLogger("nvshare.scheduler")

SLICE_S = 0.0005  # work done per turn of the loop


class Slicer:
    """The jobs waiting, urgent and others, each in the order of their turns."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._urgent: collections.deque = collections.deque()   # (steps, done)
        self._pending: collections.deque = collections.deque()  # (steps, done)
        self._urgent_next = True  # whose slice the next is, while both kinds wait
        self._scheduled = False

    def __len__(self) -> int:
        return len(self._urgent) + len(self._pending)

    def submit(self, loop, gen: Generator, done: Callable[[bytes | None], None],
               urgent: bool = False) -> None:
        """done(result) when the job is done; done(None) if it failed (logged)."""
        (self._urgent if urgent else self._pending).append((gen, done))
        if not self._scheduled:
            self._scheduled = True
            loop.call_at(loop.time(), self._slice, loop)

    def _queue(self) -> collections.deque:
        """The queue this slice goes to: the urgent one every other slice while both wait."""
        urgent = bool(self._urgent) and (self._urgent_next or not self._pending)
        self._urgent_next = not urgent
        return self._urgent if urgent else self._pending

    def _slice(self, loop) -> None:
        queue = self._queue()
        end = self._clock() + SLICE_S
        while queue:
            job = queue[0]
            gen, done = job
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
                if queue and queue[0] is job:  # its slice is over: the next job's turn
                    queue.rotate(-1)
                break
        self._scheduled = bool(self._urgent or self._pending)
        if self._scheduled:
            loop.call_at(loop.time(), self._slice, loop)
