"""The Arbiter: the lock of one GPU. It keeps the holders, the waiters and what it was told of each
client, hands every event to its mode's Strategy, and answers queries through snapshot()."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from xpushare.protocol import DropReason
from .model import (
    AGING_QUANTA, CLIENT_OVERHEAD, DEFAULT_DYNAMIC_TQ, EVICT_AFTER_QUANTA, EWMA_ALPHA,
    QUANTA_PER_SWITCH, RESERVE_FRACTION, SWITCH_REASONS, TQ_CEILING, TQ_FLOOR, Action, Client, Drop,
    Evict, Grant, Holding, Mode, Overdue, SwitchReport, Waiting, _check_bytes, check_tq,
)
from .snapshot import GpuSnapshot, HolderView, WaiterView
from .strategies import STRATEGIES, Strategy


def _ewma(average: float | None, sample: float) -> float:
    return sample if average is None else EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * average


class Arbiter:
    """The lock of one GPU.

    capacity: the bytes the GPU counts as (0 = unknown: everything fits). reserve: bytes kept free
    in AUTO admission (None = RESERVE_FRACTION of the capacity, following set_capacity).
    client_overhead: bytes added to every client's footprint for its CUDA context.
    """

    def __init__(self, mode: Mode = Mode.AUTO, tq: float | None = None, capacity: int = 0,
                 reserve: int | None = None, client_overhead: int = CLIENT_OVERHEAD):
        self._tq_explicit = None if tq is None else check_tq(tq)
        self.capacity = _check_bytes(capacity, "capacity")
        self.reserve_explicit = None if reserve is None else _check_bytes(reserve, "reserve")
        self.client_overhead = _check_bytes(client_overhead, "client overhead")
        self.strategy: Strategy = STRATEGIES[Mode(mode)]()
        self.holders: dict[Client, Holding] = {}   # insertion order = grant order
        self.waiting: dict[Client, Waiting] = {}   # insertion order = arrival order
        self._footprints: dict[Client, int] = {}
        self._priorities: dict[Client, int] = {}
        self._evicted: set[Client] = set()         # last drop carried EVICT: grant with PREFETCH
        self._preempted: dict[Client, float] = {}  # wait a preempted client resumes at its request
        self._handoff: float | None = None         # average DROP_LOCK -> LOCK_RELEASED, seconds
        self._prefetch: float | None = None        # average bulk prefetch at a grant, seconds
        self._arrivals = itertools.count()
        self._grants = itertools.count()

    # -- settings and measurements -------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self.strategy.mode

    @property
    def tq_explicit(self) -> float | None:
        """The quantum set explicitly, or None for the dynamic quantum."""
        return self._tq_explicit

    @property
    def switch_cost(self) -> float | None:
        """Average measured cost of a switch (seconds), None before any was measured."""
        if self._handoff is None and self._prefetch is None:
            return None
        return (self._handoff or 0.0) + (self._prefetch or 0.0)

    @property
    def tq(self) -> float:
        """The effective quantum: the explicit one, else the dynamic one."""
        if self._tq_explicit is not None:
            return self._tq_explicit
        cost = self.switch_cost
        if cost is None:
            return DEFAULT_DYNAMIC_TQ
        return min(TQ_CEILING, max(TQ_FLOOR, QUANTA_PER_SWITCH * cost))

    @property
    def reserve(self) -> int:
        if self.reserve_explicit is not None:
            return self.reserve_explicit
        return int(self.capacity * RESERVE_FRACTION)

    @property
    def budget(self) -> int | None:
        """Bytes the holders' footprints may take together in AUTO; None: capacity unknown."""
        if not self.capacity:
            return None
        return max(0, self.capacity - self.reserve)

    @property
    def queue(self) -> list[Client]:
        """The waiters in arrival order (order() gives the order they are served in)."""
        return list(self.waiting)

    def footprint(self, client: Client) -> int:
        return self._footprints.get(client, 0) + self.client_overhead

    def footprints(self, clients: Iterable[Client]) -> int:
        return sum(self.footprint(c) for c in clients)

    def priority(self, client: Client) -> int:
        """The base priority."""
        return self._priorities.get(client, 0)

    def effective_priority(self, client: Client, now: float) -> int:
        """A waiter's base priority plus its aging; a client not waiting has its base priority."""
        w = self.waiting.get(client)
        if w is None:
            return self.priority(client)
        aging = math.floor(max(0.0, now - w.since) / (AGING_QUANTA * self.tq))
        return self.priority(client) + aging

    def rank(self, client: Client) -> int:
        """A holder's priority against preemption: its base priority plus its aging at the grant."""
        h = self.holders.get(client)
        return self.priority(client) + (h.bonus if h is not None else 0)

    def order(self, now: float) -> list[Client]:
        """The waiters in the order they are served: effective priority (highest first), then
        arrival."""
        return sorted(self.waiting,
                      key=lambda c: (-self.effective_priority(c, now), self.waiting[c].seq))

    def live_holders(self) -> list[Client]:
        """Holders not draining, in grant order."""
        return [c for c, h in self.holders.items() if h.drop_sent is None]

    # -- events -----------------------------------------------------------------------------
    def request(self, client: Client, now: float) -> list[Action]:
        if client in self.holders or client in self.waiting:
            return []
        # A preempted client did not get its turn: it goes on aging from the wait it had.
        since = now - self._preempted.pop(client, 0.0)
        self.waiting[client] = Waiting(since=since, seq=next(self._arrivals))
        return self._step(now)

    def release(self, client: Client, now: float, report: SwitchReport | None = None) -> list[Action]:
        """The client gave the GPU up; `report` is what it measured of the switch (LOCK_RELEASED)."""
        h = self.holders.pop(client, None)
        if h is None:
            return []
        if h.drop_sent is not None and h.drop_reason in SWITCH_REASONS:
            self._handoff = _ewma(self._handoff, max(0.0, now - h.drop_sent))
        if report is not None and math.isfinite(report.prefetch) and report.prefetch > 0:
            self._prefetch = _ewma(self._prefetch, report.prefetch)
        return self._step(now)

    def disconnect(self, client: Client, now: float) -> list[Action]:
        held = self.holders.pop(client, None) is not None
        queued = self.waiting.pop(client, None) is not None
        self._footprints.pop(client, None)
        self._priorities.pop(client, None)
        self._evicted.discard(client)
        self._preempted.pop(client, None)
        return self._step(now) if (held or queued) else []

    def tick(self, now: float) -> list[Action]:
        return self._step(now)

    def set_mode(self, mode: Mode, now: float) -> list[Action]:
        mode = Mode(mode)
        if mode == self.mode:
            return []
        self.strategy = STRATEGIES[mode]()
        return self.strategy.enter(self, now) + self._step(now)

    def set_tq(self, tq: float | None, now: float) -> list[Action]:
        """An explicit quantum, or None for the dynamic one; either way holders get a fresh
        quantum."""
        self._tq_explicit = None if tq is None else check_tq(tq)
        return self.strategy.retune(self, now) + self._step(now)

    def set_capacity(self, nbytes: int, now: float) -> list[Action]:
        self.capacity = _check_bytes(nbytes, "capacity")
        return self._step(now)

    def set_footprint(self, client: Client, nbytes: int, now: float) -> list[Action]:
        """The client's device memory (managed plus other bytes) on this GPU, its context not
        included."""
        self._footprints[client] = _check_bytes(nbytes, "footprint")
        return self._step(now)

    def set_priority(self, client: Client, priority: int, now: float) -> list[Action]:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"invalid priority {priority!r}: an integer is required")
        self._priorities[client] = priority
        return self._step(now)

    # -- queries ----------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        deadlines = [h.deadline for h in self.holders.values() if h.deadline is not None]
        return min(deadlines, default=None)

    def state_of(self, client: Client) -> str:
        if client in self.holders:
            return "holding"
        if client in self.waiting:
            return "waiting"
        return "idle"

    def holds(self, client: Client) -> bool:
        return client in self.holders

    def held_since(self, client: Client) -> float | None:
        """When the client's lock was granted; None if it holds none."""
        h = self.holders.get(client)
        return None if h is None else h.since

    def snapshot(self, now: float) -> GpuSnapshot:
        """Everything a reader may know of this GPU's lock at `now` (the policy's read API)."""
        operation, why = self.strategy.describe(self, now)
        holders = tuple(HolderView(c, h.since, max(0.0, now - h.since), h.drop_sent is not None,
                                   self.priority(c), self.rank(c))
                        for c, h in self.holders.items())
        waiters = tuple(WaiterView(c, max(0.0, now - self.waiting[c].since), self.priority(c),
                                   self.effective_priority(c, now))
                        for c in self.order(now))
        return GpuSnapshot(
            mode=self.mode, operation=operation, why=why, holders=holders, waiters=waiters,
            queue=tuple(self.waiting), capacity=self.capacity, budget=self.budget,
            used=self.footprints(self.holders), tq=self.tq,
            tq_source="explicit" if self._tq_explicit is not None else "dynamic",
            switch_cost=self.switch_cost, next_deadline=self.next_deadline())

    def describe(self, now: float) -> dict:
        """The snapshot's summary as a dict: operation, why, used, budget, blocked (the waiters in
        the order they will be served; after a step every waiter left is blocked), tq, tq_source,
        switch_cost."""
        s = self.snapshot(now)
        return {"operation": s.operation, "why": s.why, "used": s.used, "budget": s.budget,
                "blocked": [w.client for w in s.waiters], "tq": s.tq, "tq_source": s.tq_source,
                "switch_cost": s.switch_cost}

    # -- helpers for strategies --------------------------------------------------------------
    def _step(self, now: float) -> list[Action]:
        return self.strategy.step(self, now)

    def _grant(self, client: Client, now: float, quantum: float) -> Grant:
        assert client not in self.holders, "double grant"
        bonus = self.effective_priority(client, now) - self.priority(client)
        w = self.waiting.pop(client, None)
        prefetch = client in self._evicted
        self._evicted.discard(client)
        self.holders[client] = Holding(since=now, seq=next(self._grants), bonus=bonus,
                                       waited=max(0.0, now - w.since) if w else 0.0,
                                       deadline=(now + quantum) if quantum else None)
        return Grant(client, quantum, prefetch)

    def _drop(self, client: Client, now: float, reason: DropReason, evict: bool = False) -> Drop:
        h = self.holders[client]
        h.drop_sent, h.drop_reason, h.expired = now, reason, False
        h.deadline = now + self.tq  # when to report it Overdue
        if reason == DropReason.PREEMPTED:
            self._preempted[client] = h.waited
        if evict:
            self._evicted.add(client)
        else:
            self._evicted.discard(client)
        return Drop(client, reason, evict)

    def _check_draining(self, now: float) -> list[Action]:
        """Overdue, then Evict, for draining holders silent past their deadline."""
        actions: list[Action] = []
        for client, h in list(self.holders.items()):  # eviction removes holders
            if h.drop_sent is None or h.deadline is None or h.deadline > now:
                continue
            evict_at = h.drop_sent + EVICT_AFTER_QUANTA * self.tq
            if now >= evict_at:
                del self.holders[client]
                actions.append(Evict(client, now - h.drop_sent))
            else:
                h.deadline = evict_at
                actions.append(Overdue(client, now - h.drop_sent))
        return actions

    def _mark_expired(self, now: float) -> None:
        for h in self.holders.values():
            if h.drop_sent is None and h.deadline is not None and h.deadline <= now:
                h.expired, h.deadline = True, None

    def _rearm_expired(self, head: Client | None, now: float) -> None:
        """Expired holders left running: no timer, unless `head` (the next waiter) waits for aging
        to reach a holder's priority; then that holder is looked at again a quantum later."""
        for client, h in self.holders.items():
            if h.drop_sent is not None or not h.expired:
                continue
            if head is not None and self.effective_priority(head, now) < self.priority(client):
                if h.deadline is None or h.deadline <= now:
                    h.deadline = now + self.tq
            else:
                h.deadline = None
