"""The policy's read API: a snapshot of one GPU's arbiter, taken at one instant.

Status, logs and metrics read the policy only through these frozen views, so the arbiter's records
(Holding, Waiting) stay its own and can change shape without touching their readers.

Each holder and waiter view has `share`, the client's compute share (DEFAULT_SHARE unless set). It
is given as a keyword and kept as an attribute, not a dataclass field: the views list, compare and
print the fields they had before shares existed, so a view of a client with the default share reads
as it always did. GpuSnapshot keeps `resident` and `reclaiming` (residency.py) the same way.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from typing import TYPE_CHECKING

from .model import DEFAULT_SHARE, Client, Mode
from .residency import idle_note

if TYPE_CHECKING:
    from .arbiter import Arbiter


def _keep_share(view, share: float) -> None:
    object.__setattr__(view, "share", float(share))


@dataclass(frozen=True)
class HolderView:
    client: Client
    since: float            # when the lock was granted
    held_for: float         # seconds, at the snapshot
    dropping: bool          # told to drop, not released yet (draining)
    priority: int           # base priority
    rank: int               # priority against preemption (base plus the aging it had at the grant)
    share: InitVar[float] = DEFAULT_SHARE  # compute share (an attribute, not a field)

    def __post_init__(self, share: float) -> None:
        _keep_share(self, share)


@dataclass(frozen=True)
class WaiterView:
    client: Client
    waited: float           # seconds, at the snapshot
    priority: int           # base priority
    effective_priority: int  # base plus aging: what orders the waiters
    share: InitVar[float] = DEFAULT_SHARE  # compute share (an attribute, not a field)

    def __post_init__(self, share: float) -> None:
        _keep_share(self, share)


@dataclass(frozen=True)
class GpuSnapshot:
    mode: Mode
    operation: str          # idle, exclusive, concurrent or serialised
    why: str                # one sentence: what applies on this GPU and why
    holders: tuple[HolderView, ...]   # grant order
    waiters: tuple[WaiterView, ...]   # the order they will be served in
    queue: tuple[Client, ...]         # the waiters in arrival order
    capacity: int           # bytes; 0 = unknown
    budget: int | None      # bytes the holders may take together in auto mode; None: unknown
    used: int               # bytes counted for the holders, draining ones included
    tq: float               # the effective quantum, seconds
    tq_source: str          # "explicit" or "dynamic"
    switch_cost: float | None  # average measured switch, seconds; None before any was measured
    next_deadline: float | None  # when the arbiter next wants tick()
    # Attributes, not fields (see above): the bytes of clients' memory on the GPU (holders'
    # footprints and what idle clients that answer EVICT keep there), and the clients asked to move
    # theirs to host that have not answered, in the order they were asked.
    resident: InitVar[int] = 0
    reclaiming: InitVar[tuple] = ()

    def __post_init__(self, resident: int, reclaiming: tuple) -> None:
        object.__setattr__(self, "resident", int(resident))
        object.__setattr__(self, "reclaiming", tuple(reclaiming))


def take_snapshot(arb: Arbiter, now: float) -> GpuSnapshot:
    """Arbiter.snapshot: the views of `arb` at `now`."""
    operation, why = arb.strategy.describe(arb, now)
    why += idle_note(arb)
    holders = tuple(HolderView(c, h.since, max(0.0, now - h.since), h.drop_sent is not None,
                               arb.priority(c), arb.rank(c), share=arb.share(c))
                    for c, h in arb.holders.items())
    waiters = tuple(WaiterView(c, max(0.0, now - arb.waiting[c].since), arb.priority(c),
                               arb.effective_priority(c, now), share=arb.share(c))
                    for c in arb.order(now))
    return GpuSnapshot(
        mode=arb.mode, operation=operation, why=why, holders=holders, waiters=waiters,
        queue=tuple(arb.waiting), capacity=arb.capacity, budget=arb.budget, used=arb._used(),
        tq=arb.tq, tq_source="explicit" if arb.tq_explicit is not None else "dynamic",
        switch_cost=arb.switch_cost, next_deadline=arb.next_deadline(),
        resident=arb.resident_total(), reclaiming=tuple(arb._res.reclaiming))
