"""The records of policy/gang.py: a job, its members and its seats (a job on one GPU, the key that
GPU's Arbiter knows), the phases of a job and what a gang call returns. Pure data."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .model import Grant, SwitchReport

FORM_TIMEOUT = 60.0  # seconds a job of known size waits for its missing members


class Phase(str, Enum):
    IDLE = "idle"            # holds no seat and asks for none
    ACQUIRING = "acquiring"  # asks for its seats in order; nobody is granted yet
    RUNNING = "running"      # holds every seat; members are granted
    DROPPING = "dropping"    # a seat was dropped: members release, seats go as they empty


@dataclass(frozen=True)
class JobFormed:
    """A job of known size may run: all its members joined (complete) or FORM_TIMEOUT passed."""
    job: Job
    waited: float
    complete: bool
    client: Any = None  # not about one client (the caller's actions all have this field)


@dataclass(eq=False)
class Member:
    priority: int = 0
    owner: Any = None       # its user (owners.py); None: nobody's
    own: int = 0            # the priority it gave itself, which orders it among its owner's
    share: float | None = None
    gpus: set = field(default_factory=set)          # the GPUs it attached
    wants: set = field(default_factory=set)         # GPUs it asked for and was not granted
    held_since: dict = field(default_factory=dict)  # GPU -> when it was granted
    swappable: bool = False                         # it answers EVICT (gangroute.py)


@dataclass(eq=False)
class Seat:
    """A job on one GPU: the key its arbiter knows. Hashed by identity."""
    job: Job
    gpu: Any
    members: dict = field(default_factory=dict)  # member -> its footprint on this GPU (bytes)
    holding: set = field(default_factory=set)    # members granted this GPU in this run
    grant: Grant | None = None                   # the arbiter's grant while the seat holds
    report: SwitchReport | None = None           # the last member release's switch report
    prefetched: set = field(default_factory=set)  # members already sent this run's PREFETCH
    # Residency (gangroute.py): what the seat's arbiter was told of it, and what members reported.
    swappable: bool = False                      # every member answers EVICT (the arbiter knows)
    resident: dict = field(default_factory=dict)  # member -> its bytes on the GPU while not held
    evicting: bool = False                        # its members were told to drop with EVICT
    evict_mib: int = 0                            # ... its lone member, to move that much (0: all)
    refused: bool = False                         # a member's swap-out left memory that could not move
    reclaim: set | None = None                    # members sent Reclaim that have not answered

    @property
    def pid(self) -> int:  # for log lines that name a client of an arbiter
        return min((getattr(m, "pid", 0) for m in self.members), default=0)


@dataclass(eq=False)
class Job:
    key: Hashable
    label: str
    size: int | None    # members to wait for; None: not known
    since: float        # when its first member joined
    members: dict = field(default_factory=dict)  # member -> Member
    seats: dict = field(default_factory=dict)    # GPU -> Seat
    phase: Phase = Phase.IDLE
    formed: bool = True

    def priority(self) -> int:
        return max((m.priority for m in self.members.values()), default=0)

    def owner(self):
        """Its members' user, when they have one (owners.py); else None."""
        owners = {m.owner for m in self.members.values()}
        return owners.pop() if len(owners) == 1 else None

    def own_priority(self) -> int:
        return max((m.own for m in self.members.values()), default=0)

    def share(self) -> float | None:
        shares = [m.share for m in self.members.values() if m.share is not None]
        return max(shares) if shares else None


@dataclass
class Outcome:
    actions: list = field(default_factory=list)  # (gpu or None, action) in order
    gpus: set = field(default_factory=set)       # GPUs whose arbiter had an event
