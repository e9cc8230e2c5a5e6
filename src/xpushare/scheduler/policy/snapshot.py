"""The policy's read API: a snapshot of one GPU's arbiter, taken at one instant.

Status, logs and metrics read the policy only through these frozen views, so the arbiter's records
(Holding, Waiting) stay its own and can change shape without touching their readers.

Each holder and waiter view has `share`, the client's compute share (DEFAULT_SHARE unless set). It
is given as a keyword and kept as an attribute, not a dataclass field: the views list, compare and
print the fields they had before shares existed, so a view of a client with the default share reads
as it always did.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass

from .model import DEFAULT_SHARE, Client, Mode


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
