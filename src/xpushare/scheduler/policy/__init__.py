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

What a client declares of itself (HELLO's priority, SETTINGS' share) reaches set_priority and
set_share as declared.py says: unless an admin governs it, a user's declared shares count in their
ratio with the largest at most the default (own_shares).

Compute shares (set_share): a weight per client, DEFAULT_SHARE unless set. A share orders nothing
(priorities keep their meaning); it splits the GPU's time among clients that take turns. In modes
with quanta, a grant's quantum is tq * share / mean share of the GPU's holders and waiters
(Arbiter.quantum_of, bounded by model.scaled_quantum), worked out again for the holders with a
quantum under way when that mean changes; with equal shares every quantum is tq, as without shares.
In AUTO, clients of unequal shares take turns even when their memory fits (strategies.py
AutoStrategy). In OFF shares change nothing.

Residency (residency.py; docs/protocol.md EVICT and RESIDENCY). The arbiter knows where each
client's memory on the GPU is: a holder's footprint is there; a client that answers EVICT
(set_swappable) keeps there, while it does not hold, what it left at its release (its footprint, or
after a drop with EVICT what it reported before releasing, else 0) or reported since (residency(),
cut to its footprint); one that does not answer EVICT counts nothing then, as always
(resident_bytes, resident_total). In AUTO and SERIAL a waiter is granted only if it fits beside the
holders and those bytes (its own bytes there count as its footprint). When the next waiter to serve
does not fit because of them, idle clients are asked to move theirs to host (Reclaim, answered by
residency()): lower base priority first, then least recently used (last grant or release), as few as
make it fit counting those already asked; it waits for their answers, and an answer that moved
memory makes the client's next grant carry PREFETCH. A client whose answer left bytes there
(REFUSED) is not asked again before its next grant; when even every idle client would not make room,
today's rules apply besides (holders drop with EVICT; a waiter runs alone once nothing is left to
reclaim). A client silent EVICT_AFTER_QUANTA quanta after its Reclaim gets Evict, as a silent holder
does. Running holders grown past the budget beside idle clients' bytes get room the same way. Mode
OFF reclaims nothing. Residency is granted, never declared: a report lowers those bytes, never
raises them; an EVICT answered more than a quantum late or not at all (or a DROP_LOCK not) is a
strike against the client's owner, whose idle clients' bytes then count for nothing for a back-off
that doubles with each strike (backoff.py; Backoff says so).

The quantum (docs/protocol.md "The quantum") is explicit, or dynamic: QUANTA_PER_SWITCH times the
measured switch cost, so that switching takes at most about 5% of the GPU's time. The switch cost is
the arbiter's own measure of handoffs (DROP_LOCK to release) plus the prefetch time clients report,
which no client can raise on its own: a report counts only for a grant that carried PREFETCH, is cut
to a plausible time (model.plausible_prefetch), goes into that client's own average (forgotten at
its disconnect), and the cost takes the lower median of those averages once SWITCH_REPORTERS
clients have one (median.py).

Cost. No event rescans or sorts the queue (tests/scheduler/test_policy_cost.py counts the work at 10
and at 1000 clients). With n waiters, P distinct base priorities among them (a handful), r "odd"
waiters (queue.py: resumed preempted waits and the like, few), h holders, d holders whose deadline
has passed and g grants, an event costs:
- keeping the records: O(log n) for the waiter it touches (queue.py), O(log h) for each holder
  whose deadline changes (holders.py); next_deadline() O(log h) amortised; a release or disconnect
  O(log m) amortised for the m clients with a prefetch average (median.py);
- OFF: O(g), granting every waiter;
- SERIAL: O(P + r log r) to find the next waiter, plus O(d log h) (one holder runs at a time);
- AUTO: the same, plus admission, which reads the waiters in serving order lazily and stops as soon
  as nobody further can be granted: O(P + r log r) to start, O(P log n) per waiter it reads, and it
  reads the g it grants and the s it passes over because they do not fit while a waiter further on
  that is not outranked would (strategies.py AutoStrategy._admit); each grant past those gives them
  a skip, so such a waiter is read at most MAX_SKIP times with a grant behind it before, as a
  barrier, it ends every walk. Dropping holders to make room, and fitting them when they grow,
  read the running holders, which fit in the budget beside each other: a few (about capacity /
  CLIENT_OVERHEAD at most), as are the expired ones rearmed for aging.
Residency adds O(log n) for the client an event touches (running sums of parked bytes, of bytes in
flight and of bytes that may be reclaimed; the idle clients that may be asked in a heap keyed by
(priority, last used), lazily deleted; the reclaims in flight in a heap by their deadlines,
which next_deadline() reads in O(1) amortised), and O(k log n) to choose k clients to reclaim.
set_mode and set_tq give every holder a fresh deadline: O(h log h). With unequal shares, an event
that changes the contenders' mean share (request, release, disconnect, set_share) gives each of the
k holders with a quantum under way its new deadline: O(k log h); in SERIAL k is 1, in AUTO they are
running holders of one share. With equal shares the mean never changes: O(1).
"""

from .arbiter import Arbiter
from .declared import DEFAULT_PRIORITY, claimed_latency_sensitive, claimed_priority, own_shares, raises
from .median import LowerMedian
from .model import (
    AGING_QUANTA, CLIENT_OVERHEAD, DEFAULT_DYNAMIC_TQ, DEFAULT_SHARE, EVICT_AFTER_QUANTA,
    EWMA_ALPHA, MAX_SKIP, PREFETCH_FLOOR_RATE, SWITCH_REPORTERS, QUANTA_PER_SWITCH,
    RESERVE_FRACTION, SHARE_RATIO_MAX, SHARE_RATIO_MIN, SWITCH_REASONS, SWITCH_REPORT_MAX,
    TQ_CEILING, TQ_FLOOR, TQ_MAX, TQ_MIN, Action, Backoff, Client, Drop, Evict, Grant, Holding, Mode, Overdue,
    Reclaim, SwitchReport, Waiting, check_share, check_tq, plausible_prefetch, scaled_quantum,
)
from .snapshot import GpuSnapshot, HolderView, WaiterView
from .strategies import STRATEGIES, AutoStrategy, OffStrategy, SerialStrategy, Strategy

__all__ = [
    "DEFAULT_PRIORITY", "claimed_latency_sensitive", "claimed_priority", "own_shares", "raises",
    "AGING_QUANTA", "CLIENT_OVERHEAD", "DEFAULT_DYNAMIC_TQ", "DEFAULT_SHARE", "EVICT_AFTER_QUANTA",
    "EWMA_ALPHA",
    "MAX_SKIP", "PREFETCH_FLOOR_RATE", "SWITCH_REPORTERS", "QUANTA_PER_SWITCH", "RESERVE_FRACTION",
    "SHARE_RATIO_MAX", "SHARE_RATIO_MIN", "STRATEGIES", "SWITCH_REASONS", "SWITCH_REPORT_MAX", "TQ_CEILING", "TQ_FLOOR", "TQ_MAX", "TQ_MIN",
    "Action", "Arbiter", "AutoStrategy", "Backoff", "Client", "Drop", "Evict", "GpuSnapshot", "Grant",
    "HolderView", "Holding", "LowerMedian", "Mode", "OffStrategy", "Overdue", "Reclaim",
    "SerialStrategy",
    "Strategy", "SwitchReport", "WaiterView", "Waiting", "check_share", "check_tq",
    "plausible_prefetch", "scaled_quantum",
]
