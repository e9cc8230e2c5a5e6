"""The policy's read API: a snapshot of one GPU's arbiter, taken at one instant.

Status, logs and metrics read the policy only through these frozen views, so the arbiter's records
(Holding, Waiting) stay its own and can change shape without touching their readers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Client, Mode


@dataclass(frozen=True)
class HolderView:
    client: Client
    since: float            # when the lock was granted
    held_for: float         # seconds, at the snapshot
    dropping: bool          # told to drop, not released yet (draining)
    priority: int           # base priority
    rank: int               # priority against preemption (base plus the aging it had at the grant)


@dataclass(frozen=True)
class WaiterView:
    client: Client
    waited: float           # seconds, at the snapshot
    priority: int           # base priority
    effective_priority: int  # base plus aging: what orders the waiters


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
