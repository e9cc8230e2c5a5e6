"""The Arbiter: the lock of one GPU. It keeps the holders, the waiters and what it was told of each
client, hands every event to its mode's Strategy, and answers queries through snapshot().

The holders live in a HolderIndex (holders.py) and the waiters in a WaitQueue (queue.py), so that no
event rescans or sorts them: an event costs O(log n) in the waiters (O(P) in the priorities they
wait at) plus O(k) in the clients whose state it changes, as the strategies' docstrings detail.
The public dicts `holders` and `waiting` are those indexes' records: read them, change them only
through events.

Compute shares and the quanta they scale are kept in a ShareBook (shares.py); where clients' memory
is, and the room taken from idle ones, in a ResidencyBook with its events and queries (residency.py).

Why it is long: a little over 400 lines, what is left here is the one object every strategy and
the gang layer call through (events, expiry, hold_off/resume); its records, indexes, share
arithmetic, residency, owners' own order (owners.py) and snapshot are in their own files, and
splitting the event methods would spread one lock's state.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

from ...wire.protocol import DropReason
from .model import (
    AGING_QUANTA, CLIENT_OVERHEAD, EVICT_AFTER_QUANTA, RESERVE_FRACTION, Action, Client, Drop, Evict,
    Grant, Holding, Mode, Overdue, SwitchReport, Waiting, _check_bytes, check_share,
)
from .backoff import Strikes, strike
from .holders import HolderIndex
from .owners import Owners
from .queue import WaitQueue
from .residency import NetFootprints, Residency, ResidencyBook
from .shares import ShareBook
from .switchcost import SwitchCosts
from .snapshot import GpuSnapshot, take_snapshot
from .strategies import STRATEGIES, Strategy


class Arbiter(Residency):
    """The lock of one GPU.

    capacity: the bytes the GPU counts as (0 = unknown: everything fits). reserve: bytes kept free
    in AUTO admission (None = reserve_fraction of the capacity, following set_capacity).
    client_overhead: bytes added to every client's footprint for its CUDA context.
    """

    def __init__(self, mode: Mode = Mode.AUTO, tq: float | None = None, capacity: int = 0,
                 reserve: int | None = None, client_overhead: int = CLIENT_OVERHEAD,
                 reserve_fraction: float = RESERVE_FRACTION):
        self._costs = SwitchCosts(tq)
        self.capacity = _check_bytes(capacity, "capacity")
        self.reserve_explicit = None if reserve is None else _check_bytes(reserve, "reserve")
        if not 0 <= reserve_fraction < 1:
            raise ValueError(f"reserve fraction must be in [0, 1): {reserve_fraction!r}")
        self.reserve_fraction = reserve_fraction
        self.client_overhead = _check_bytes(client_overhead, "client overhead")
        self.strategy: Strategy = STRATEGIES[Mode(mode)]()
        self._footprints: dict[Client, int] = {}
        self._shares = ShareBook()
        self._held = HolderIndex(self._footprints, self._shares.shares)
        self._res = ResidencyBook()
        self._strikes = Strikes()   # owners that made waiters wait on them (backoff.py)
        self._queue = WaitQueue(NetFootprints(self._footprints, self._res.parked))
        self.holders: dict[Client, Holding] = self._held.records   # grant order
        self.waiting: dict[Client, Waiting] = self._queue.records  # arrival order
        self._priorities: dict[Client, int] = {}
        self._owners = Owners()  # whose each client is, and its own priority (owners.py)
        self._evicted: set[Client] = set()         # last drop carried EVICT: grant with PREFETCH
        self._preempted: dict[Client, float] = {}  # wait a preempted client resumes at its request
        self._arrivals = itertools.count()
        self._grants = itertools.count()

    # -- settings and measurements -------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self.strategy.mode

    @property
    def tq_explicit(self) -> float | None:
        """The quantum set explicitly, or None for the dynamic quantum."""
        return self._costs.explicit

    @property
    def prefetch_cost(self) -> float | None:
        """The prefetch time a switch adds (seconds; switchcost.py), None before it is known."""
        return self._costs.prefetch_cost

    @property
    def handoff_cost(self) -> float | None:
        """The handoff time a switch takes, DROP_LOCK sent to LOCK_RELEASED (seconds)."""
        return self._costs.handoff_cost

    @property
    def switch_cost(self) -> float | None:
        """Average measured cost of a switch (seconds), None before any was measured."""
        return self._costs.switch_cost

    @property
    def tq(self) -> float:
        """The effective quantum: the explicit one, else the dynamic one (switchcost.py)."""
        return self._costs.tq

    @property
    def reserve(self) -> int:
        if self.reserve_explicit is not None:
            return self.reserve_explicit
        return int(self.capacity * self.reserve_fraction)

    @property
    def budget(self) -> int | None:
        """The capacity less the reserve: bytes the holders' footprints may take together in AUTO
        while no idle client keeps memory on the GPU (admit_budget counts those); None: unknown."""
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

    def share(self, client: Client) -> float:
        """The client's compute share (DEFAULT_SHARE unless set)."""
        return self._shares.share(client)

    def mean_share(self) -> float | None:
        """The mean share of the clients contending for the GPU (holders and waiters); None when
        none does."""
        mean = self._shares.mean()
        return None if mean is None else float(mean)

    def quantum_of(self, client: Client) -> float:
        """The quantum a grant to `client` carries now, in a mode with quanta: tq scaled by its
        share over the contenders' mean share (model.scaled_quantum), exactly tq while every
        contender has the same share."""
        return self._shares.quantum(self.tq, client)

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
        arrival (O(n log P): for reading; events use _head or the lazy _ordered)."""
        return [c for _, _, c in self._ordered(now)]

    def live_holders(self) -> list[Client]:
        """Holders not draining, in grant order."""
        return list(self._held.live)

    def _ordered(self, now: float):
        """(-effective priority, seq, client) of the waiters in serving order, lazily."""
        return self._queue.ordered(now, AGING_QUANTA * self.tq)

    def _head(self, now: float) -> Client | None:
        """The first waiter in serving order: O(P + r log r) (queue.py)."""
        return self._queue.head(now, AGING_QUANTA * self.tq)

    def _used(self) -> int:
        """footprints(holders), from the running sum."""
        return self._held.footprint_all + len(self.holders) * self.client_overhead

    def _live_used(self) -> int:
        """footprints(live_holders()), from the running sum."""
        return self._held.footprint_live + len(self._held.live) * self.client_overhead

    # -- events -----------------------------------------------------------------------------
    def request(self, client: Client, now: float) -> list[Action]:
        if client in self.holders or client in self.waiting:
            return []
        if (not self.holders and not self.waiting and client not in self._preempted
                and not self._res.reclaiming
                and self._res.parked_total == self._res.parked.get(client, 0)):
            # Nobody holds or waits (a lone client, the common case): every mode's step would
            # grant this one at once, with its usual quantum and no aging bonus. Taken directly,
            # this is the lock round trip's fast path; test_policy_differential checks it decides
            # as the full step does.
            next(self._arrivals)
            self._shares.contend(client, 1)
            self._shares.lone()
            return [self._grant(client, now, self.strategy.quantum(self, client))]
        # A preempted client did not get its turn: it goes on aging from the wait it had.
        since = now - self._preempted.pop(client, 0.0)
        self._queue.add(client, Waiting(since=since, seq=next(self._arrivals)),
                        self.priority(client))
        self._owners.reorder(self, client)
        self._res.sync(self, client)
        self._shares.contend(client, 1)
        self._shares.rescale(self, now)
        return self._step(now)

    def release(self, client: Client, now: float, report: SwitchReport | None = None) -> list[Action]:
        """The client gave the GPU up; `report` is what it measured of the switch (LOCK_RELEASED).

        The handoff (DROP_LOCK to LOCK_RELEASED) is the arbiter's own measure, kept per client
        (a client that releases late stretches only its own average). The client's
        prefetch time counts only when this grant carried PREFETCH, cut to what is plausible for
        its footprint (plausible_prefetch), and only into its own average."""
        h = self._held.remove(client)
        if h is None:
            return []
        self._shares.contend(client, -1)
        self._shares.quantum_start.pop(client, None)
        self._costs.released(client, h, report, self._footprints.get(client, 0), now)
        self._res_released(client, now)
        if not self.holders and not self.waiting:
            return []  # nothing is left for a step to decide (no holder to expire, no waiter)
        self._shares.rescale(self, now)
        return self._step(now)

    def disconnect(self, client: Client, now: float) -> list[Action]:
        held = self._held.remove(client) is not None
        queued = self._queue.remove(client) is not None
        if held or queued:
            self._shares.contend(client, -1)
        self._shares.forget(client)
        self._footprints.pop(client, None)
        self._priorities.pop(client, None)
        self._owners.forget(client)
        self._evicted.discard(client)
        self._preempted.pop(client, None)
        self._costs.forget(client)
        self._strikes.forget(client)
        parked = self._res.forget(self, client)   # its bytes on the GPU, or its reclaim, go
        if not (held or queued or parked):
            return []
        self._shares.rescale(self, now)
        return self._step(now)

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
        self._costs.set_explicit(tq)
        return self.strategy.retune(self, now) + self._step(now)

    def set_capacity(self, nbytes: int, now: float) -> list[Action]:
        self.capacity = _check_bytes(nbytes, "capacity")
        return self._step(now)

    def set_footprint(self, client: Client, nbytes: int, now: float) -> list[Action]:
        """The client's device memory (managed plus other bytes) on this GPU, its context not
        included."""
        nbytes = _check_bytes(nbytes, "footprint")
        self._held.resize(client, self._footprints.get(client, 0), nbytes)
        self._footprints[client] = nbytes
        self._res_resized(client, nbytes)
        self._queue.resize(client)
        return self._step(now)

    def set_share(self, client: Client, share: float | None, now: float) -> list[Action]:
        """The client's compute share: a finite number > 0, or None for DEFAULT_SHARE. Among
        clients that take turns, a quantum is in proportion to its share (quantum_of); in AUTO a
        waiter does not run beside a holder of another share (strategies.py AutoStrategy)."""
        share = check_share(share)
        old = self._shares.set(client, share, client in self.holders or client in self.waiting)
        if share == old:
            return []
        self._held.reshare(client, old, share)
        self._shares.rescale(self, now)
        return self._step(now)

    def set_owner(self, client: Client, owner, own: int) -> None:
        """Whose the client is (a user; None: nobody's) and the priority it gave itself, which
        orders it among its owner's waiters of its base priority from its next request on
        (owners.py). Decides nothing now."""
        self._owners.set(client, owner, own)

    def set_priority(self, client: Client, priority: int, now: float) -> list[Action]:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"invalid priority {priority!r}: an integer is required")
        self._priorities[client] = priority
        self._queue.reprioritize(client, priority)
        self._res.sync(self, client)
        return self._step(now)

    def hold_off(self, client: Client) -> None:
        """A holder that may not run yet (gang.py: its job waits for its other GPUs): its quantum
        stops until resume(). It stays a holder: preemption and drops still apply."""
        h = self.holders.get(client)
        if h is not None and h.drop_sent is None:
            self._held.arm(client, h, None)
            self._held.set_expired(client, h, False)
            self._shares.quantum_start.pop(client, None)

    def resume(self, client: Client, now: float) -> None:
        """A holder held off runs from `now`: a fresh quantum, in a mode with quanta."""
        h = self.holders.get(client)
        if h is not None and h.drop_sent is None and self.strategy.quantum(self, client):
            self._start_quantum(client, now)

    # -- queries ----------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        held, reclaim = self._held.next_deadline(), self._res.next_deadline()
        return held if reclaim is None else reclaim if held is None else min(held, reclaim)

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
        return take_snapshot(self, now)

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
        return self._expire_reclaims(now) + self.strategy.step(self, now)

    def _grant(self, client: Client, now: float, quantum: float) -> Grant:
        assert client not in self.holders, "double grant"
        bonus = self.effective_priority(client, now) - self.priority(client)
        w = self._queue.remove(client)
        prefetch = client in self._evicted
        self._evicted.discard(client)
        self._costs.granted(client, prefetch)
        self._held.add(client, Holding(since=now, seq=next(self._grants), bonus=bonus,
                                       waited=max(0.0, now - w.since) if w else 0.0,
                                       deadline=(now + quantum) if quantum else None))
        if quantum:
            self._shares.quantum_start[client] = now
        self._res_granted(client, now)
        return Grant(client, quantum, prefetch)

    def _drop(self, client: Client, now: float, reason: DropReason, evict: bool = False,
              evict_mib: int = 0) -> Drop:
        h = self.holders[client]
        h.drop_sent, h.drop_reason, h.expired = now, reason, False
        self._held.draining(client)
        self._shares.quantum_start.pop(client, None)
        self._held.arm(client, h, now + self.tq)  # when to report it Overdue
        if reason == DropReason.PREEMPTED:
            self._preempted[client] = h.waited
        if evict:
            self._evicted.add(client)
        else:
            self._evicted.discard(client)
        h.evict_mib = evict_mib if evict else 0
        self._res_dropped(client, h.evict_mib)
        return Drop(client, reason, evict, evict_mib=evict_mib if evict else 0)

    def _start_quantum(self, client: Client, now: float) -> None:
        """A fresh quantum for a running holder, from `now` (quantum_of: scaled by its share)."""
        self._held.arm(client, self.holders[client], now + self.quantum_of(client))
        self._shares.quantum_start[client] = now

    def _arm(self, client: Client, deadline: float | None) -> None:
        """Set a holder's deadline (strategies set deadlines only through this)."""
        self._held.arm(client, self.holders[client], deadline)

    def _set_expired(self, client: Client, expired: bool) -> None:
        self._held.set_expired(client, self.holders[client], expired)

    def _expire(self, now: float) -> list[Action]:
        """Holders whose deadline passed, from the deadline heap (O(d log h), d of them): draining
        ones silent too long are reported Overdue, then evicted; the others' quantum expired."""
        actions: list[Action] = []
        evicted = False
        for client, h in self._held.due(now):
            if h.drop_sent is None:
                self._held.arm(client, h, None)
                self._held.set_expired(client, h, True)
                self._shares.quantum_start.pop(client, None)
                continue
            evict_at = h.drop_sent + EVICT_AFTER_QUANTA * self.tq
            if now >= evict_at:
                self._held.remove(client)
                self._shares.contend(client, -1)
                actions.append(Evict(client, now - h.drop_sent))
                if client in self._res.swappable:   # what it loses: idle residency (backoff.py)
                    actions.append(strike(self, client, now - h.drop_sent, now))
                evicted = True
            else:
                self._held.arm(client, h, evict_at)
                actions.append(Overdue(client, now - h.drop_sent))
        if evicted:
            self._shares.rescale(self, now)   # the contenders' mean share may have changed
        return actions

    def _rearm_expired(self, head: Client | None, now: float) -> None:
        """Expired holders left running: no timer, unless `head` (the next waiter) waits for aging
        to reach a holder's priority; then that holder is looked at again a quantum later."""
        if head is None:  # every expired holder loses its timer: those that have one
            for client in list(self._held.rearmed):
                self._held.arm(client, self.holders[client], None)
            return
        eff = self.effective_priority(head, now)
        for client in list(self._held.expired):
            h = self.holders[client]
            if eff < self.priority(client):
                if h.deadline is None or h.deadline <= now:
                    self._held.arm(client, h, now + self.tq)
            else:
                self._held.arm(client, h, None)
