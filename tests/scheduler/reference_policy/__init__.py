"""A frozen copy of the scheduling policy (src/xpushare/scheduler/policy) as it stood at ceb2232, before
its data structures were reworked for cost independent of the queue length. Test code only: it is the
oracle of tests/scheduler/test_policy_differential.py, which replays seeded random event sequences
against this copy and the product's policy and requires identical actions and snapshots. Do not
change it (only its imports of xpushare.protocol are absolute); it is deliberately slow (O(n^2) per
event in auto mode) and is what test_policy_cost.py shows the product no longer is.

The original docstring follows.

The scheduling policy of one GPU: who may submit work, and when they must give the GPU up.

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

from .arbiter import Arbiter
from .model import (
    AGING_QUANTA, CLIENT_OVERHEAD, DEFAULT_DYNAMIC_TQ, EVICT_AFTER_QUANTA, EWMA_ALPHA, MAX_SKIP,
    QUANTA_PER_SWITCH, RESERVE_FRACTION, SWITCH_REASONS, TQ_CEILING, TQ_FLOOR, TQ_MAX, TQ_MIN,
    Action, Client, Drop, Evict, Grant, Holding, Mode, Overdue, SwitchReport, Waiting, check_tq,
)
from .snapshot import GpuSnapshot, HolderView, WaiterView
from .strategies import STRATEGIES, AutoStrategy, OffStrategy, SerialStrategy, Strategy

__all__ = [
    "AGING_QUANTA", "CLIENT_OVERHEAD", "DEFAULT_DYNAMIC_TQ", "EVICT_AFTER_QUANTA", "EWMA_ALPHA",
    "MAX_SKIP", "QUANTA_PER_SWITCH", "RESERVE_FRACTION", "STRATEGIES", "SWITCH_REASONS", "TQ_CEILING",
    "TQ_FLOOR", "TQ_MAX", "TQ_MIN", "Action", "Arbiter", "AutoStrategy", "Client", "Drop", "Evict",
    "GpuSnapshot", "Grant", "HolderView", "Holding", "Mode", "OffStrategy", "Overdue",
    "SerialStrategy", "Strategy", "SwitchReport", "WaiterView", "Waiting", "check_tq",
]
