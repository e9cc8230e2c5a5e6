"""The scheduling policy of one GPU: who may submit work, and when they must give the GPU up.

Pure: no sockets, clocks or NVML. Every call takes `now` (seconds on any monotonic clock) and returns
the actions the caller must carry out, in order. Clients are opaque hashable keys.

An Arbiter keeps the holders (clients granted the lock, in grant order), the FIFO queue of waiters and
a mode. What a mode does lives in one Strategy class per mode (STRATEGIES), so that later modes (a
memory-aware AUTO, priorities) slot in as further strategies using the same state.

Rules every strategy keeps:
- A client is never granted while it holds, and is never both holding and queued.
- A holder told to drop stays a holder until it releases or disconnects (it is draining): nobody is
  granted in its place meanwhile. If it stays silent for a quantum the arbiter reports Overdue (for
  the log); the drop is not repeated. In serial mode a holder still silent EVICT_AFTER_QUANTA quanta
  after the drop (a stopped or wedged process) is evicted: it loses the lock, the caller must close
  its connection, and the GPU is handed on.
- release() for a lock not held, and request() by a holder or a waiter, are ignored.
- disconnect() removes the client at once and hands the GPU on.
- The quantum is sent to clients in milliseconds as a u32: tq must lie in [TQ_MIN, TQ_MAX].
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Hashable, Union

from ..protocol import DropReason

Client = Hashable

TQ_MIN = 0.001            # seconds: a quantum under 1 ms would be sent as 0 = "no quantum"
TQ_MAX = 4_294_967.0      # seconds: the largest whole second whose milliseconds fit a u32
EVICT_AFTER_QUANTA = 2    # a dropped holder silent this many quanta after DROP_LOCK is evicted


def check_tq(tq: float) -> float:
    """`tq` as a float; ValueError unless it is a number of seconds in [TQ_MIN, TQ_MAX]."""
    try:
        value = float(tq)
    except (TypeError, ValueError):
        raise ValueError(f"invalid quantum {tq!r}: a number of seconds is required") from None
    if not TQ_MIN <= value <= TQ_MAX:  # also refuses nan and inf
        raise ValueError(f"invalid quantum {tq!r}: it must lie between {TQ_MIN:g} and {TQ_MAX:.0f} "
                         "seconds (it is sent in milliseconds as a 32-bit number)")
    return value


class Mode(str, Enum):
    SERIAL = "serial"  # nvshare's anti-thrash on: one holder, FCFS, time quantum
    OFF = "off"        # everyone runs at once, no quantum


@dataclass(frozen=True)
class Grant:
    client: Client
    quantum: float  # seconds; 0 = no quantum (keep it until released)


@dataclass(frozen=True)
class Drop:
    client: Client
    reason: DropReason


@dataclass(frozen=True)
class Overdue:
    """A holder told to drop `waited` seconds ago has not released yet (informational)."""
    client: Client
    waited: float


@dataclass(frozen=True)
class Evict:
    """A holder silent `waited` seconds after DROP_LOCK lost the lock: close its connection."""
    client: Client
    waited: float


Action = Union[Grant, Drop, Overdue, Evict]


@dataclass
class Holding:
    since: float                        # when the lock was granted
    deadline: float | None = None       # next time the strategy looks at this holder
    drop_sent: float | None = None      # when DROP_LOCK was sent, if it was
    expired: bool = False               # its quantum ran out while nobody waited


class Strategy:
    """What a mode does. Subclasses implement admit() and expire(); both mutate the arbiter."""
    mode: Mode

    def admit(self, arb: "Arbiter", now: float) -> list[Action]:
        """Grant waiters that may run now."""
        raise NotImplementedError

    def expire(self, arb: "Arbiter", now: float) -> list[Action]:
        """Handle holders whose deadline has passed."""
        return []

    def enter(self, arb: "Arbiter", now: float) -> list[Action]:
        """The arbiter has just switched to this mode (holders and queue are as the old mode left them)."""
        return []

    def retune(self, arb: "Arbiter", now: float) -> list[Action]:
        """The quantum changed."""
        return []


class SerialStrategy(Strategy):
    """One holder at a time, first come first served, for a quantum of `arb.tq` seconds.

    At expiry the holder is asked to drop (reason QUANTUM) if someone waits. If nobody waits it keeps
    the GPU but is marked expired, with no timer: the first request that arrives after that drops it
    at once, so a waiter never waits for a quantum the holder has already had. A holder that has not
    released EVICT_AFTER_QUANTA quanta after its drop is evicted. The first waiter is granted when
    the GPU is free.
    """
    mode = Mode.SERIAL

    def admit(self, arb, now):
        if arb.holders or not arb.queue:
            return []
        return [arb._grant(arb.queue.pop(0), now, arb.tq)]

    def expire(self, arb, now):
        actions: list[Action] = []
        for client, h in list(arb.holders.items()):  # eviction removes holders
            due = h.deadline is not None and h.deadline <= now
            if h.drop_sent is not None:
                if due:
                    actions.append(self._overdue_or_evict(arb, client, h, now))
            elif due or h.expired:
                if arb.queue:
                    actions.append(arb._drop(client, now, DropReason.QUANTUM))
                else:
                    h.expired, h.deadline = True, None
        return actions

    @staticmethod
    def _overdue_or_evict(arb, client, h, now) -> Action:
        evict_at = h.drop_sent + EVICT_AFTER_QUANTA * arb.tq
        if now >= evict_at:
            del arb.holders[client]
            return Evict(client, now - h.drop_sent)
        h.deadline = evict_at
        return Overdue(client, now - h.drop_sent)

    def enter(self, arb, now):
        # Keep the first holder (with a fresh quantum); ask the others to give the GPU up. They stay
        # holders until they release; after that they queue again with their next request.
        actions: list[Action] = []
        kept = False
        for client, h in arb.holders.items():
            if h.drop_sent is not None:  # already draining: look at it again in a quantum
                h.deadline = now + arb.tq
            elif not kept:
                kept, h.deadline, h.expired = True, now + arb.tq, False
            else:
                actions.append(arb._drop(client, now, DropReason.ADMIN))
        return actions

    def retune(self, arb, now):
        # A fresh quantum of the new length, counted from the change; a holder that has already had
        # its quantum (expired) or is draining keeps that state.
        for h in arb.holders.values():
            if h.drop_sent is None and not h.expired:
                h.deadline = now + arb.tq
        return []


class OffStrategy(Strategy):
    """Everyone runs at once: every request is granted immediately with no quantum."""
    mode = Mode.OFF

    def admit(self, arb, now):
        waiters, arb.queue = arb.queue, []
        return [arb._grant(c, now, 0.0) for c in waiters]

    def enter(self, arb, now):
        for h in arb.holders.values():
            # no quanta, and no Overdue reports or evictions for holders still draining
            h.deadline, h.expired = None, False
        return []


STRATEGIES: dict[Mode, type[Strategy]] = {Mode.SERIAL: SerialStrategy, Mode.OFF: OffStrategy}


class Arbiter:
    """The lock of one GPU."""

    def __init__(self, mode: Mode = Mode.SERIAL, tq: float = 30.0):
        self.tq = check_tq(tq)
        self.strategy: Strategy = STRATEGIES[Mode(mode)]()
        self.holders: dict[Client, Holding] = {}  # insertion order = grant order
        self.queue: list[Client] = []

    @property
    def mode(self) -> Mode:
        return self.strategy.mode

    # -- events -----------------------------------------------------------------------------
    def request(self, client: Client, now: float) -> list[Action]:
        if client in self.holders or client in self.queue:
            return []
        self.queue.append(client)
        return self._step(now)

    def release(self, client: Client, now: float) -> list[Action]:
        if self.holders.pop(client, None) is None:
            return []
        return self._step(now)

    def disconnect(self, client: Client, now: float) -> list[Action]:
        held = self.holders.pop(client, None) is not None
        queued = client in self.queue
        if queued:
            self.queue.remove(client)
        return self._step(now) if (held or queued) else []

    def tick(self, now: float) -> list[Action]:
        return self._step(now)

    def set_mode(self, mode: Mode, now: float) -> list[Action]:
        mode = Mode(mode)
        if mode == self.mode:
            return []
        self.strategy = STRATEGIES[mode]()
        return self.strategy.enter(self, now) + self._step(now)

    def set_tq(self, tq: float, now: float) -> list[Action]:
        self.tq = check_tq(tq)
        return self.strategy.retune(self, now) + self._step(now)

    # -- queries ----------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        deadlines = [h.deadline for h in self.holders.values() if h.deadline is not None]
        return min(deadlines, default=None)

    def state_of(self, client: Client) -> str:
        if client in self.holders:
            return "holding"
        if client in self.queue:
            return "waiting"
        return "idle"

    # -- helpers for strategies --------------------------------------------------------------
    def _step(self, now: float) -> list[Action]:
        return self.strategy.expire(self, now) + self.strategy.admit(self, now)

    def _grant(self, client: Client, now: float, quantum: float) -> Grant:
        assert client not in self.holders, "double grant"
        self.holders[client] = Holding(since=now, deadline=(now + quantum) if quantum else None)
        return Grant(client, quantum)

    def _drop(self, client: Client, now: float, reason: DropReason) -> Drop:
        h = self.holders[client]
        h.drop_sent = now
        h.deadline = now + self.tq  # when to report it Overdue
        return Drop(client, reason)
