"""The policy's vocabulary: its constants, the modes, the actions an arbiter returns, and the records
it keeps of holders and waiters. Pure data; the rules live in strategies.py and arbiter.py."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from ...wire.protocol import DropReason
from ...wire.scheduling import CONTEXT_RESERVE, TQ_MAX, TQ_MIN, Mode, check_tq  # noqa: F401 (the policy's names)

Client = Hashable

EVICT_AFTER_QUANTA = 2    # a dropped holder silent this many quanta after DROP_LOCK is evicted

TQ_FLOOR = 2.0            # seconds: the dynamic quantum never goes below ...
TQ_CEILING = 120.0        # ... nor above these
SHARE_RATIO_MIN = 0.1     # a share-scaled quantum is at least this many quanta ...
SHARE_RATIO_MAX = 10.0    # ... and at most this many (model.scaled_quantum)
DEFAULT_DYNAMIC_TQ = 5.0  # seconds: the dynamic quantum until a switch has been measured
QUANTA_PER_SWITCH = 19    # quantum = 19 x switch cost: switching is cost / (quantum + cost) = 5%
EWMA_ALPHA = 0.3          # weight of the newest sample in the switch-cost averages
# What clients report of a switch (LOCK_RELEASED) is theirs to make up, so it is bounded: no phase
# counts for more than SWITCH_REPORT_MAX, and a prefetch for no more than moving the client's whole
# footprint at PREFETCH_FLOOR_RATE. That rate is well under the slowest migration measured (demand
# faults, 4.7 GB/s; a bulk prefetch ran at 46-50 GB/s: docs/benchmarks.md, "Measured facts").
SWITCH_REPORT_MAX = 60.0  # seconds
PREFETCH_FLOOR_RATE = 1e9  # bytes per second
# The dynamic quantum counts the handoff (DROP_LOCK -> LOCK_RELEASED, which a client stretches by
# releasing late) and the prefetch time each as the lower median of the clients' own averages, so
# that among clients taking turns one alone cannot raise it. A prefetch time, which the client
# reports, counts only once this many clients have one.
SWITCH_REPORTERS = 2

MAX_SKIP = 3              # times later waiters may start before a waiter that does not fit
AGING_QUANTA = 2          # a waiter's priority rises by one for every this many quanta waited
CLIENT_OVERHEAD = CONTEXT_RESERVE  # bytes a client's CUDA context takes beyond its footprint
RESERVE_FRACTION = 0.05   # default memory kept free in AUTO admission, a share of the capacity
DEFAULT_SHARE = 1.0       # a client's compute share (weight) unless one is set

# Drops whose handoff time is a context switch (an ADMIN drop is a mode change, not a switch).
SWITCH_REASONS = frozenset({DropReason.QUANTUM, DropReason.PREEMPTED, DropReason.MEMORY})


def check_share(share: float | None) -> float:
    """A compute share as a float (None: DEFAULT_SHARE); ValueError unless it is a finite number
    greater than 0."""
    if share is None:
        return DEFAULT_SHARE
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        raise ValueError(f"invalid share {share!r}: a number greater than 0 is required")
    value = float(share)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"invalid share {share!r}: a finite number greater than 0 is required")
    return value


def scaled_quantum(tq: float, ratio: float) -> float:
    """The quantum of a client whose share is `ratio` times the mean share of the clients
    contending with it: tq * ratio, kept within [SHARE_RATIO_MIN * tq, SHARE_RATIO_MAX * tq], at
    most max(TQ_CEILING, tq) and at least TQ_MIN.

    The bounds are relative to tq, not the dynamic quantum's floor: a quantum of a tenth of tq is
    still twice the switch cost with the dynamic quantum (QUANTA_PER_SWITCH switches), so a share
    under the mean shortens its turns, not just lengthens the others'. (A floor of TQ_FLOOR split a
    30/70 pair at tq = 2 s as 2 s / 2.8 s, 42/58.) A ratio of 1 gives tq exactly, and time splits
    in proportion to the shares while every ratio lies within [SHARE_RATIO_MIN, SHARE_RATIO_MAX]
    and no quantum passes the ceiling."""
    if ratio == 1.0:
        return tq
    ratio = min(max(ratio, SHARE_RATIO_MIN), SHARE_RATIO_MAX)
    return max(TQ_MIN, min(tq * ratio, max(TQ_CEILING, tq)))


MiB = 1 << 20


def kept_after_eviction(footprint: int, evict_mib: int) -> int:
    """What a holder dropped with EVICT keeps on the GPU if it moves just evict_mib (0: all):
    counted for it until its report of what stays (NVSHARE_EVICT=background reports after its
    release), and the most that report may say it keeps unless REFUSED (residency.py)."""
    return max(0, footprint - evict_mib * MiB) if evict_mib else 0


def _check_bytes(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid {what} {value!r}: a number of bytes (integer >= 0) is required")
    return value


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
    # Dropped with the rest of its job (gang.py): its drain may wait on a collective whose peer is
    # dropped too, so the library bounds it. Not part of equality: what a strategy decides is the
    # same drop whatever job it falls on.
    gang: bool = field(default=False, compare=False)
    # With evict: the MiB of them the next holder needs moved (whole allocations, at least this
    # much; the rest stays parked on the GPU); 0: all. Not part of equality: how much room the
    # same drop makes depends on the bytes of the moment.
    evict_mib: int = field(default=0, compare=False)


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


@dataclass(frozen=True)
class Reclaim:
    """Ask idle `client` to move its memory on this GPU to host (EVICT); its bytes count as resident
    until residency() answers (residency.py)."""
    client: Client


@dataclass(frozen=True)
class Backoff:
    """`client` answered EVICT late or not at all, or held its lock past a drop (`waited` seconds):
    for `seconds` the memory its owner's clients keep on the GPU while idle is not counted
    (backoff.py). Informational: for the log."""
    client: Client
    waited: float
    seconds: float


Action = Grant | Drop | Overdue | Evict | Reclaim | Backoff


@dataclass(frozen=True)
class SwitchReport:
    """What a client measured of a switch, from LOCK_RELEASED (seconds)."""
    drain: float = 0.0     # finishing its outstanding work
    evict: float = 0.0     # the bulk move to host after DROP_LOCK with EVICT
    prefetch: float = 0.0  # the bulk move back at the grant it now releases

    @classmethod
    def from_us(cls, drain_us: int, evict_us: int, prefetch_us: int) -> SwitchReport:
        """LOCK_RELEASED's microseconds, each cut to SWITCH_REPORT_MAX."""
        if not (drain_us or evict_us or prefetch_us):
            return _NO_SWITCH  # most releases: nothing was dropped, evicted or prefetched
        return cls(*(min(us / 1e6, SWITCH_REPORT_MAX) for us in (drain_us, evict_us, prefetch_us)))


_NO_SWITCH = SwitchReport()


def plausible_prefetch(seconds: float, footprint: int) -> float:
    """A reported prefetch time cut to what is plausible for a client of `footprint` bytes: at
    most SWITCH_REPORT_MAX, and at most the time to move the footprint at PREFETCH_FLOOR_RATE;
    0.0 for a time that is not a positive number."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        return 0.0
    return min(float(seconds), SWITCH_REPORT_MAX, max(0, footprint) / PREFETCH_FLOOR_RATE)


@dataclass
class Holding:
    since: float                        # when the lock was granted
    seq: int = 0                        # grant order (higher = newer)
    deadline: float | None = None       # next time the strategy looks at this holder
    drop_sent: float | None = None      # when DROP_LOCK was sent, if it was
    drop_reason: DropReason | None = None
    # With a drop's EVICT: the MiB it was asked to move (0: all), which bounds what it may say it
    # keeps (residency.py). Not part of equality: the reference policy's records lack it.
    evict_mib: int = field(default=0, compare=False)
    expired: bool = False               # its quantum ran out and it was not dropped
    bonus: int = 0                      # the aging it had when granted (part of its rank)
    waited: float = 0.0                 # how long it had waited for this grant


@dataclass
class Waiting:
    since: float                        # when it asked
    seq: int                            # arrival order
    skips: int = 0                      # later waiters granted before it
    reserved: bool = False              # holders were dropped to make room for it

