"""The scheduling policy of one GPU: who may submit work, and when they must give the GPU up.

Pure: no sockets, clocks or NVML. Every call takes `now` (seconds on any monotonic clock) and
returns the actions the caller must carry out, in order. Clients are opaque hashable keys.

An Arbiter keeps the holders (clients granted the lock, in grant order), the waiters (in arrival
order), what it was told of each client (footprint, priority) and a mode. What a mode does lives in
one Strategy class per mode (STRATEGIES):
- AUTO (the default): waiters whose footprints fit in the GPU's budget beside the holders run at
  once; the others wait, in priority order with a bounded skip-ahead, and holders that had their
  quantum give the GPU up (with EVICT) until the next waiter fits.
- SERIAL (nvshare's anti-thrash on): one holder at a time, for a quantum, in priority order.
- OFF: everyone runs at once, no quantum.

Rules every strategy keeps:
- A client is never granted while it holds, and is never both holding and waiting.
- A holder told to drop stays a holder until it releases or disconnects (it is draining): its
  memory still counts and nobody is granted in its place meanwhile. If it stays silent for a quantum
  the arbiter reports Overdue (for the log); the drop is not repeated. In AUTO and SERIAL a holder
  still silent EVICT_AFTER_QUANTA quanta after the drop (a stopped or wedged process) is evicted:
  it loses the lock, the caller must close its connection, and the GPU is handed on.
- release() for a lock not held, and request() by a holder or a waiter, are ignored.
- disconnect() removes the client at once, forgets what the arbiter knew of it (priority,
  footprint, eviction) and hands the GPU on.
- The quantum is sent to clients in milliseconds as a u32: tq must lie in [TQ_MIN, TQ_MAX].

Priorities (docs/protocol.md "Priorities"): a waiter's effective priority is its base priority plus
one per AGING_QUANTA quanta waited. Waiters are served by effective priority, then arrival. The next
waiter in that order preempts a holder at once when its BASE priority is higher than the holder's
rank (its base priority plus the aging it had when granted, so that a waiter let in by aging keeps
its turn); it takes a holder's turn at the end of the holder's quantum when its effective priority
is at least the holder's base priority. A preempted client did not get its turn: when it asks again
it goes on aging from the wait it had (otherwise a busy higher-priority client could preempt it at
every grant, and it would never age enough to keep one).

The quantum (docs/protocol.md "The quantum") is explicit, or dynamic: QUANTA_PER_SWITCH times the
measured switch cost, so that switching takes at most about 5% of the GPU's time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from enum import Enum

from ..protocol import DropReason

Client = Hashable

TQ_MIN = 0.001            # seconds: a quantum under 1 ms would be sent as 0 = "no quantum"
TQ_MAX = 4_294_967.0      # seconds: the largest whole second whose milliseconds fit a u32
EVICT_AFTER_QUANTA = 2    # a dropped holder silent this many quanta after DROP_LOCK is evicted

TQ_FLOOR = 2.0            # seconds: the dynamic quantum never goes below ...
TQ_CEILING = 120.0        # ... nor above these
DEFAULT_DYNAMIC_TQ = 5.0  # seconds: the dynamic quantum until a switch has been measured
QUANTA_PER_SWITCH = 19    # quantum = 19 x switch cost: switching is cost / (quantum + cost) = 5%
EWMA_ALPHA = 0.3          # weight of the newest sample in the switch-cost averages

MAX_SKIP = 3              # times later waiters may start before a waiter that does not fit
AGING_QUANTA = 2          # a waiter's priority rises by one for every this many quanta waited
CLIENT_OVERHEAD = 768 * 2**20  # bytes a client's CUDA context takes beyond its footprint
                               # (measured: 747 MiB for PyTorch with cuBLAS and cuDNN)
RESERVE_FRACTION = 0.05   # default memory kept free in AUTO admission, a share of the capacity

# Drops whose handoff time is a context switch (an ADMIN drop is a mode change, not a switch).
SWITCH_REASONS = frozenset({DropReason.QUANTUM, DropReason.PREEMPTED, DropReason.MEMORY})


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


def _check_bytes(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid {what} {value!r}: a number of bytes (integer >= 0) is required")
    return value


class Mode(str, Enum):
    AUTO = "auto"      # memory-aware: run together what fits, take turns otherwise
    SERIAL = "serial"  # nvshare's anti-thrash on: one holder, priority then FCFS, time quantum
    OFF = "off"        # everyone runs at once, no quantum


@dataclass(frozen=True)
class Grant:
    client: Client
    quantum: float          # seconds; 0 = no quantum (keep it until released)
    prefetch: bool = False  # its allocations were evicted at its last drop: bring them back in bulk


@dataclass(frozen=True)
class Drop:
    client: Client
    reason: DropReason
    evict: bool = False     # the next holder needs the room: move the allocations to host in bulk


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


Action = Grant | Drop | Overdue | Evict


@dataclass(frozen=True)
class SwitchReport:
    """What a client measured of a switch, from LOCK_RELEASED (seconds)."""
    drain: float = 0.0     # finishing its outstanding work
    evict: float = 0.0     # the bulk move to host after DROP_LOCK with EVICT
    prefetch: float = 0.0  # the bulk move back at the grant it now releases


@dataclass
class Holding:
    since: float                        # when the lock was granted
    seq: int = 0                        # grant order (higher = newer)
    deadline: float | None = None       # next time the strategy looks at this holder
    drop_sent: float | None = None      # when DROP_LOCK was sent, if it was
    drop_reason: DropReason | None = None
    expired: bool = False               # its quantum ran out and it was not dropped
    bonus: int = 0                      # the aging it had when granted (part of its rank)
    waited: float = 0.0                 # how long it had waited for this grant


@dataclass
class Waiting:
    since: float                        # when it asked
    seq: int                            # arrival order
    skips: int = 0                      # later waiters granted before it
    reserved: bool = False              # holders were dropped to make room for it


def _ewma(average: float | None, sample: float) -> float:
    return sample if average is None else EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * average


def _operation(arb: Arbiter) -> str:
    """idle: nobody holds; concurrent: several run at once; serialised: one runs (or the GPU is
    changing hands) while others wait their turn; exclusive: one runs and nobody waits."""
    if not arb.holders:
        return "idle"
    if len(arb.live_holders()) > 1:
        return "concurrent"
    return "serialised" if arb.waiting else "exclusive"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


class Strategy:
    """What a mode does. step() makes the decisions; it mutates the arbiter and returns actions."""
    mode: Mode

    def step(self, arb: Arbiter, now: float) -> list[Action]:
        raise NotImplementedError

    def enter(self, arb: Arbiter, now: float) -> list[Action]:
        """The arbiter has just switched to this mode (holders and waiters as the old mode left
        them)."""
        return []

    def retune(self, arb: Arbiter, now: float) -> list[Action]:
        """The quantum was set: a fresh quantum of the new length, counted from the change. A holder
        that has already had its quantum (expired) or is draining keeps that state."""
        for h in arb.holders.values():
            if h.drop_sent is None and not h.expired:
                h.deadline = now + arb.tq
        return []

    def describe(self, arb: Arbiter, now: float) -> tuple[str, str]:
        """(operation, why) for Arbiter.describe."""
        raise NotImplementedError


class SerialStrategy(Strategy):
    """One holder at a time, for a quantum of `arb.tq` seconds, waiters in priority order.

    The next waiter preempts the holder at once when its base priority is higher than the holder's
    rank. At expiry the holder is asked to drop (reason QUANTUM) if the next waiter's effective
    priority is at least the holder's base priority; if a waiter of lower priority waits, it is
    looked at again a quantum later (aging catches up). If nobody waits it keeps the GPU, marked
    expired, with no timer: the first request that arrives after that drops it at once. The drop
    carries EVICT only when the capacity is known and the two do not fit together. The next waiter
    is granted when the GPU is free.
    """
    mode = Mode.SERIAL

    def step(self, arb, now):
        actions = arb._check_draining(now)
        arb._mark_expired(now)
        order = arb.order(now)
        head = order[0] if order else None
        if head is not None:
            for client in arb.live_holders():
                h = arb.holders[client]
                if h.expired and arb.effective_priority(head, now) >= arb.priority(client):
                    reason = DropReason.QUANTUM
                elif arb.priority(head) > arb.rank(client):
                    reason = DropReason.PREEMPTED
                else:
                    continue
                actions.append(arb._drop(client, now, reason, self._evict(arb, client, head)))
        if not arb.holders and head is not None:
            actions.append(arb._grant(head, now, arb.tq))
        arb._rearm_expired(head, now)
        return actions

    @staticmethod
    def _evict(arb: Arbiter, leaving: Client, coming: Client) -> bool:
        budget = arb.budget
        return budget is not None and arb.footprint(leaving) + arb.footprint(coming) > budget

    def enter(self, arb, now):
        # Keep the first holder (with a fresh quantum); ask the others to give the GPU up. They stay
        # holders until they release; after that they queue again with their next request.
        actions: list[Action] = []
        kept = None
        for client, h in arb.holders.items():
            if h.drop_sent is not None:  # already draining: look at it again in a quantum
                h.deadline = now + arb.tq
            elif kept is None:
                kept, h.deadline, h.expired = client, now + arb.tq, False
            else:
                evict = self._evict(arb, client, kept)
                actions.append(arb._drop(client, now, DropReason.ADMIN, evict))
        return actions

    def describe(self, arb, now):
        if not arb.holders:
            return "idle", "serial mode: nobody holds the GPU"
        waiting = f"{len(arb.waiting)} waiting" if arb.waiting else "nobody waiting"
        return _operation(arb), f"serial mode: one client at a time, {waiting}"


class AutoStrategy(Strategy):
    """Memory-aware: run together the waiters that fit, serialise the others.

    Each step, in order:
    1. Draining holders silent too long are reported Overdue, then evicted.
    2. Growth: when the non-draining holders no longer fit in the budget, the lowest-ranked (then
       newest) are dropped (MEMORY, EVICT) until the rest fit; the highest-ranked, oldest holder is
       always kept.
    3. Admission: waiters in priority order are granted while they fit beside the holders (draining
       ones included) and those granted before them. A waiter that does not fit is blocked; each
       later waiter granted past it counts a skip, and once it has MAX_SKIP skips, or holders were
       dropped to make room for it, nobody behind it is granted until it has run. Nor is a waiter
       granted past a blocked one that could preempt it. With no holder at all, the first waiter is
       granted even when it does not fit (it runs alone).
    4. Making room for the first blocked waiter: holders whose quantum expired and whose base
       priority its effective priority reaches (QUANTUM, oldest grant first), then holders ranked
       below its base priority (PREEMPTED, lowest rank then newest first), are dropped with EVICT,
       as few as make it fit once they (and holders already draining) are gone. When even all of
       them would not make it fit, nobody is dropped yet.
    5. Expired holders not dropped get no timer, unless the first blocked waiter waits for aging
       to reach their priority: then they are looked at again a quantum later.
    """
    mode = Mode.AUTO

    def step(self, arb, now):
        actions = arb._check_draining(now)
        arb._mark_expired(now)
        actions += self._fit_holders(arb, now)
        grants, blocked = self._admit(arb, now)
        actions += grants
        head = blocked[0] if blocked else None
        if head is not None:
            actions += self._make_room(arb, head, now)
        arb._rearm_expired(head, now)
        return actions

    @staticmethod
    def _fit_holders(arb: Arbiter, now: float) -> list[Action]:
        budget, live = arb.budget, arb.live_holders()
        total = arb.footprints(live)
        if budget is None or len(live) <= 1 or total <= budget:
            return []
        actions: list[Action] = []
        victims = sorted(live, key=lambda c: (arb.rank(c), -arb.holders[c].seq))[:-1]
        for client in victims:
            actions.append(arb._drop(client, now, DropReason.MEMORY, evict=True))
            total -= arb.footprint(client)
            if total <= budget:
                break
        return actions

    @staticmethod
    def _admit(arb: Arbiter, now: float) -> tuple[list[Action], list[Client]]:
        budget = arb.budget
        used = arb.footprints(arb.holders)
        grants: list[Action] = []
        blocked: list[Client] = []
        barrier = False  # a blocked waiter that nobody may pass any more
        for client in arb.order(now):
            need = arb.footprint(client)
            # Passing a blocked waiter that could preempt this one would only grant it to drop it.
            outranked = any(arb.priority(b) > arb.effective_priority(client, now) for b in blocked)
            if not (barrier or outranked) and (not arb.holders or budget is None
                                               or used + need <= budget):
                for b in blocked:
                    arb.waiting[b].skips += 1
                grants.append(arb._grant(client, now, arb.tq))
                used += need
                continue
            blocked.append(client)
            w = arb.waiting[client]
            barrier = barrier or w.reserved or w.skips >= MAX_SKIP
        return grants, blocked

    @staticmethod
    def _make_room(arb: Arbiter, head: Client, now: float) -> list[Action]:
        budget = arb.budget
        if budget is None:
            return []
        need, live = arb.footprint(head), arb.live_holders()

        def fits(rest: list[Client]) -> bool:  # draining holders count as gone
            return not rest or arb.footprints(rest) + need <= budget

        if fits(live):
            return []  # room comes when the draining holders release
        eff, base = arb.effective_priority(head, now), arb.priority(head)
        expired = [c for c in live if arb.holders[c].expired and eff >= arb.priority(c)]
        preemptable = sorted((c for c in live if c not in expired and base > arb.rank(c)),
                             key=lambda c: (arb.rank(c), -arb.holders[c].seq))
        rest, plan = list(live), []
        for client, reason in ([(c, DropReason.QUANTUM) for c in expired]
                               + [(c, DropReason.PREEMPTED) for c in preemptable]):
            rest.remove(client)
            plan.append((client, reason))
            if fits(rest):
                arb.waiting[head].reserved = True
                return [arb._drop(c, now, r, evict=True) for c, r in plan]
        return []

    def enter(self, arb, now):
        # Holders keep running. Those granted without a quantum (mode off) get one from now, and
        # draining ones a deadline to be reported overdue or evicted.
        for h in arb.holders.values():
            if h.deadline is None and (h.drop_sent is not None or not h.expired):
                h.deadline = now + arb.tq
        return []

    def describe(self, arb, now):
        budget, used = arb.budget, arb.footprints(arb.holders)
        if not arb.holders:
            return "idle", "auto mode: nobody holds the GPU"
        if budget is None:
            return _operation(arb), "auto mode: capacity unknown, every request runs at once"
        live = len(arb.live_holders())
        if live > 1:
            why = f"auto mode: {live} clients fit together ({_gib(used)} of {_gib(budget)})"
        elif used > budget:
            why = f"auto mode: one client runs alone; {_gib(used)} do not fit in {_gib(budget)}"
        else:
            why = f"auto mode: one client runs; it fits ({_gib(used)} of {_gib(budget)})"
        if arb.waiting:
            head = arb.order(now)[0]
            why += (f"; {len(arb.waiting)} waiting: the next needs {_gib(arb.footprint(head))}, "
                    f"which does not fit in the {_gib(max(0, budget - used))} left")
        return _operation(arb), why


class OffStrategy(Strategy):
    """Everyone runs at once: every request is granted immediately with no quantum.

    Priorities and footprints are ignored; draining holders are never evicted.
    """
    mode = Mode.OFF

    def step(self, arb, now):
        return [arb._grant(c, now, 0.0) for c in list(arb.waiting)]

    def enter(self, arb, now):
        for h in arb.holders.values():
            # no quanta, and no Overdue reports or evictions for holders still draining
            h.deadline, h.expired = None, False
        return []

    def retune(self, arb, now):
        return []

    def describe(self, arb, now):
        return _operation(arb), "mode off: every request runs at once, with no quantum"


STRATEGIES: dict[Mode, type[Strategy]] = {
    Mode.AUTO: AutoStrategy, Mode.SERIAL: SerialStrategy, Mode.OFF: OffStrategy,
}


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

    def describe(self, now: float) -> dict:
        """What applies on this GPU and why, for status: operation (idle, exclusive, concurrent or
        serialised), why (a short sentence), used (bytes counted for the holders, draining ones
        included), budget (bytes, None when the capacity is unknown), blocked (the waiters, in the
        order they will be served), tq (effective), tq_source (explicit or dynamic), switch_cost
        (seconds, None before any switch was measured)."""
        operation, why = self.strategy.describe(self, now)
        return {
            "operation": operation, "why": why,
            "used": self.footprints(self.holders), "budget": self.budget,
            "blocked": self.order(now),  # after a step, every waiter left is blocked
            "tq": self.tq, "tq_source": "explicit" if self._tq_explicit is not None else "dynamic",
            "switch_cost": self.switch_cost,
        }

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
