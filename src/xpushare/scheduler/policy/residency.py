"""Where each client's memory on one GPU is, the room the arbiter takes from idle clients, and how
much of it a holder dropped for a waiter moves (room_drops: only what the waiter needs).

A holder's memory is on the GPU: its footprint. A client that is not holding keeps on the GPU what
it had there, unless it moved it to host; only clients that answer EVICT (set_swappable) are
counted so, by their last known resident bytes ("parked" bytes: at a release its footprint, or
after a drop with EVICT what it reported before releasing, else 0; what it reports later, cut to
its footprint; a report lowers them, never raises them: residency is granted). Clients that do
not answer EVICT count nothing while they do not hold, as always; nor do, for a while, those whose
user answered EVICT late or not at all (backoff.py). (long: the count, the room taken from idle
clients and a drop's amount are one rule read three ways; apart, they would drift.)

AUTO and SERIAL admit a waiter only if it fits beside the holders and every parked byte, idle and
waiting clients' alike, since all of them are on the GPU (Arbiter.admit_budget; a waiter's own
parked bytes are not counted twice: they become its footprint once granted, Arbiter.need). When the
next waiter to serve does not fit, room comes from idle clients first (make_room; never from a
waiter, which needs its memory soon): Reclaim actions for idle swappable clients, lower base
priority first, then least recently used, as few as make it fit counting reclaims already in
flight. While those are in
flight it waits; when even all of them would not do, today's rules apply besides (holders drop
with EVICT; the rule "with nobody holding, the first waiter runs alone" waits until nothing more
is being reclaimed). A client whose answer left bytes on the GPU (REFUSED, or it did not move) is
not asked again before its next grant; one silent EVICT_AFTER_QUANTA quanta after the Reclaim is
evicted like a silent holder. Mode OFF reclaims nothing.

Cost: every count is a running sum (parked, in flight, reclaimable), kept as each event changes
one client; the idle clients that may be asked sit in a heap keyed by (priority, last used) with
lazy deletion, and the reclaims in flight in a heap by their deadlines: an event costs
O(log n) for the client it touches, choosing k victims O(k log n), next_deadline() O(1) amortised.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

from ...wire.protocol import DropReason
from .backoff import answered_in, owner_key, strike
from .model import (
    EVICT_AFTER_QUANTA, MiB, Action, Client, Evict, Mode, Reclaim, _check_bytes,
    kept_after_eviction,
)

if TYPE_CHECKING:
    from .arbiter import Arbiter

FITS, COVERED, SHORT = "fits", "covered", "short"   # what make_room found


class NetFootprints:
    """The footprints the wait queue orders room by (queue.py): a waiter's footprint less its own
    parked bytes, which count as its footprint once granted."""

    def __init__(self, footprints: dict[Client, int], parked: dict[Client, int]):
        self._footprints, self._parked = footprints, parked

    def get(self, client: Client, default: int = 0) -> int:
        return self._footprints.get(client, default) - self._parked.get(client, 0)


class ResidencyBook:
    """The parked bytes of one GPU's clients, the reclaims in flight and the idle clients that may
    be asked (candidates: swappable, idle, parked bytes, not being reclaimed, not refused)."""

    def __init__(self):
        self.swappable: set[Client] = set()
        self.parked: dict[Client, int] = {}       # non-holders with bytes on the GPU
        self.parked_total = 0
        self.last_used: dict[Client, float] = {}  # its last grant or release
        self.refused: set[Client] = set()         # not asked again before its next grant
        self.after_release: dict[Client, int] = {}  # a draining holder's report (drop with EVICT)
        self.reclaiming: dict[Client, tuple[float, int, float]] = {}  # (deadline, tie, sent)
        self.inflight_total = 0
        self.reclaimable_total = 0
        self._keys: dict[Client, tuple] = {}      # candidate -> its heap key
        self._victims: list[tuple] = []           # (priority, last used, tie, client)
        self._timers: list[tuple] = []            # (deadline, tie, sent, client)
        self._ties = itertools.count()

    # -- keeping the sums ----------------------------------------------------------------------
    def set(self, client: Client, nbytes: int) -> None:
        """The client's parked bytes (0: none)."""
        old = self.parked.get(client, 0)
        if nbytes:
            self.parked[client] = nbytes
        else:
            self.parked.pop(client, None)
        delta = nbytes - old
        self.parked_total += delta
        if client in self.reclaiming:
            self.inflight_total += delta
        if client in self._keys:
            self.reclaimable_total += delta

    def sync(self, arb: Arbiter, client: Client) -> None:
        """Make the client a candidate, or not, as its state now says: O(log n)."""
        want = (client in self.parked and client in self.swappable and client not in self.refused
                and client not in self.reclaiming and client not in arb.holders
                and client not in arb.waiting)
        key = self._keys.get(client)
        if not want:
            if key is not None:
                del self._keys[client]
                self.reclaimable_total -= self.parked.get(client, 0)
            return
        rank = (arb.priority(client), self.last_used.get(client, float("-inf")))
        if key is not None and key[:2] == rank:
            return
        if key is None:
            self.reclaimable_total += self.parked[client]
        key = self._keys[client] = (*rank, next(self._ties))
        heapq.heappush(self._victims, (*key, client))
        if len(self._victims) > 2 * len(self._keys) + 16:
            self._victims = [(*k, c) for c, k in self._keys.items()]
            heapq.heapify(self._victims)

    def pop_victim(self) -> Client | None:
        """The candidate to ask first (lowest priority, then least recently used), no longer a
        candidate; None when there is none."""
        while self._victims:
            *key, client = heapq.heappop(self._victims)
            if self._keys.get(client) == tuple(key):
                del self._keys[client]
                self.reclaimable_total -= self.parked[client]
                return client
        return None

    def start_reclaim(self, client: Client, now: float, tq: float) -> None:
        """Reclaim sent to `client` at `now`: silent EVICT_AFTER_QUANTA quanta, it is evicted."""
        entry = self.reclaiming[client] = (now + EVICT_AFTER_QUANTA * tq, next(self._ties), now)
        self.inflight_total += self.parked.get(client, 0)
        heapq.heappush(self._timers, (*entry, client))

    def end_reclaim(self, client: Client) -> bool:
        """The client's reclaim is over (answered, granted, forgotten); whether one was on."""
        if self.reclaiming.pop(client, None) is None:
            return False
        self.inflight_total -= self.parked.get(client, 0)
        return True

    def forget(self, arb: Arbiter, client: Client) -> bool:
        """Forget the client (it disconnected, or no longer answers EVICT); whether it had bytes
        parked or a reclaim in flight."""
        had = self.end_reclaim(client) | bool(self.parked.get(client))
        self.set(client, 0)
        self.sync(arb, client)
        self.swappable.discard(client)
        self.refused.discard(client)
        self.last_used.pop(client, None)
        self.after_release.pop(client, None)
        return had

    # -- time ------------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        timers = self._timers
        while timers and self.reclaiming.get(timers[0][-1]) != timers[0][:3]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def due(self, now: float) -> list[tuple[Client, float]]:
        """(client, seconds since its Reclaim) of the reclaims silent too long, by deadline; they
        are no longer in flight."""
        found = []
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _, _, sent, client = heapq.heappop(self._timers)
            self.end_reclaim(client)
            found.append((client, now - sent))
        return found

    # -- the room ----------------------------------------------------------------------------------
    def budget_after_reclaims(self, raw: int | None) -> int | None:
        """What the holders may take once every reclaim that may be asked for has answered."""
        if raw is None:
            return None
        return raw - (self.parked_total - self.inflight_total - self.reclaimable_total)

    def settled(self) -> bool:
        """Nothing is being reclaimed and nobody could be: today's rules apply as they are."""
        return not self.reclaiming and not self._keys


def make_room(arb: Arbiter, head: Client | None, used: int,
              now: float) -> tuple[list[Action], str]:
    """Room for `head` (the next waiter to serve; None: for running holders, `used` > 0) beside
    `used` bytes of holders that stay, from idle clients: (the Reclaims, FITS | COVERED | SHORT).
    FITS: it fits beside every parked byte. COVERED: the reclaims in flight (those just asked for
    included) make it fit once answered. SHORT: even all of them would not; every candidate is
    being reclaimed."""
    book, raw = arb._res, arb.budget
    if raw is None or arb.mode == Mode.OFF or (head is None and not used):
        return [], FITS   # nobody needs the room (a client alone may keep more than fits)
    deficit = used + (arb.need(head) if head is not None else 0) + book.parked_total - raw
    if deficit <= 0:
        return [], FITS
    deficit -= book.inflight_total
    if head in book.reclaiming:   # its own move makes no room for itself
        deficit += book.parked.get(head, 0)
    actions: list[Action] = []
    while deficit > 0 and (victim := book.pop_victim()) is not None:
        book.start_reclaim(victim, now, arb.tq)
        deficit -= book.parked[victim]
        actions.append(Reclaim(victim))
    return actions, COVERED if deficit <= 0 else SHORT


EVICT_MIB_MAX = 0xFFFFFFFF  # DROP_LOCK's u32


def room_drops(arb: Arbiter, plan: list[tuple[Client, DropReason]], now: float, budget: int | None,
               beside: int) -> list[Action]:
    """The drops of `plan` [(holder, reason)] that give the GPU to holders and a waiter taking
    `beside` bytes: with EVICT when the holders dropped would not fit beside them within `budget`,
    each moving only what does not (_eviction_sizes)."""
    if budget is None or arb.footprints(c for c, _ in plan) + beside <= budget:
        return [arb._drop(c, now, r) for c, r in plan]   # it fits beside them: nothing moves
    sizes = _eviction_sizes(arb, [c for c, _ in plan], budget - beside)
    return [arb._drop(c, now, r, mib is not None, mib or 0) for (c, r), mib in zip(plan, sizes)]


def _eviction_sizes(arb: Arbiter, victims: list[Client], slack: int) -> list[int | None]:
    """For holders dropped to make room, in the order they were chosen: the MiB each must move
    (DROP_LOCK's evict_mib; 0: all of it), or None when it may keep all it has (no EVICT).

    Once dropped, what a holder that answers EVICT keeps on the GPU counts as parked: its data,
    like any idle client's (whose context is not counted either: the reserve is for those).
    Together they may keep `slack` (the room the waiter leaves within the budget), the last chosen
    keeping first, as the first chosen would have been enough with less. It moves whole
    allocations, at least what it is asked (rounded up to a MiB), so the room asked is worth
    keeping exact: a margin would make it move a large allocation where a small one covers what
    is needed. One that keeps nothing is asked for all of it (0), so that memory it allocated
    since its last report goes too. A client that does not answer EVICT is not counted once it
    released, so it moves all of it."""
    sizes: list[int | None] = []
    for client in reversed(victims):
        if client not in arb._res.swappable:
            sizes.append(0)
            continue
        data = arb._footprints.get(client, 0)
        keep = min(data, max(0, slack))
        slack -= keep
        want = data - keep
        mib = -(-want // MiB)
        sizes.append(None if want <= 0 else 0 if not keep or mib > EVICT_MIB_MAX else mib)
    return sizes[::-1]


def idle_note(arb: Arbiter) -> str:
    """What the snapshot's `why` adds while idle clients keep memory on the GPU (AUTO, SERIAL)."""
    book = arb._res
    if not book.parked_total or arb.mode == Mode.OFF:
        return ""
    note = f"; {book.parked_total / 2**30:.1f} GiB of idle clients stay on the GPU"
    if book.reclaiming:
        note += f", {len(book.reclaiming)} asked to move theirs to host"
    return note


class Residency:
    """The Arbiter's residency events and queries (a mixin: the arbiter keeps a ResidencyBook in
    `_res`, built with its wait queue over NetFootprints)."""

    @property
    def admit_budget(self: Arbiter) -> int | None:
        """Bytes the holders' footprints may take together beside every parked byte (a waiter
        adds its need()); None: capacity unknown."""
        raw = self.budget
        return None if raw is None else raw - self._res.parked_total

    def need(self: Arbiter, client: Client) -> int:
        """The room a grant to `client` takes: its footprint (context included) less the bytes it
        has parked on the GPU already."""
        return self.footprint(client) - self._res.parked.get(client, 0)

    def resident_bytes(self: Arbiter, client: Client) -> int:
        """A holder: its footprint (its context not included); a client not holding that answers
        EVICT: its last known bytes on the GPU; otherwise 0."""
        if client in self.holders:
            return self._footprints.get(client, 0)
        return self._res.parked.get(client, 0)

    def resident_total(self: Arbiter) -> int:
        """The sum of resident_bytes over every client, from running sums."""
        return self._held.footprint_all + self._res.parked_total

    def is_reclaiming(self: Arbiter, client: Client) -> bool:
        return client in self._res.reclaiming

    def set_swappable(self: Arbiter, client: Client, swappable: bool, now: float,
                      resident: int = 0) -> list[Action]:
        """Whether the client answers EVICT. A client that does not is not counted while it does
        not hold, and is never reclaimed; one that starts to is counted from `resident` (what its
        releases left on the GPU, as the caller saw them: gangroute.py), or from its next
        release."""
        book = self._res
        if swappable:
            new = client not in book.swappable
            book.swappable.add(client)
            if not (new and resident and client not in self.holders):
                return []
            book.set(client, min(_check_bytes(resident, "resident bytes"),
                                 self._footprints.get(client, 0)))
            book.last_used.setdefault(client, now)
            self._queue.resize(client)
            book.sync(self, client)
            return self._step(now)
        if client not in book.swappable:
            return []
        had = book.forget(self, client)
        self._queue.resize(client)
        return self._step(now) if had else []

    def residency(self: Arbiter, client: Client, resident: int, now: float,
                  refused: bool = False) -> list[Action]:
        """The client has `resident` bytes of its memory on the GPU now (cut to its footprint);
        it ends its reclaim. A report lowers what the client is counted for, never raises it
        (residency is granted, backoff.py): a client not holding is counted at most what it was.
        An answer later than LATE_ANSWER_QUANTA quanta is a strike against its owner (backoff.py).
        refused: it could not move (its host memory for swap ran out): it is not asked again
        before its next grant, and the waiter it was to make room for is served as without it.
        From a holder told to drop with EVICT (sent before LOCK_RELEASED): what stays on the GPU
        after its release, at most what the drop let it keep unless refused."""
        resident = _check_bytes(resident, "resident bytes")
        book = self._res
        if client not in book.swappable:
            return []
        resident = min(resident, self._footprints.get(client, 0))
        h = self.holders.get(client)
        if h is not None:
            if h.drop_sent is not None and client in self._evicted:
                if refused:
                    book.refused.add(client)
                else:   # it was asked to move the rest
                    resident = min(resident, kept_after_eviction(
                        self._footprints.get(client, 0), h.evict_mib))
                book.after_release[client] = resident
            return []   # a swap-in at its grant: it counts its footprint while it holds
        asked = book.reclaiming.get(client)
        answered = book.end_reclaim(client)
        actions = answered_in(self, client, now - asked[2], now) if asked else []
        book.set(client, min(resident, book.parked.get(client, 0)))   # lowered, never raised
        if refused or (answered and resident):   # asked again, it would answer the same
            book.refused.add(client)
        if resident < self._footprints.get(client, 0):
            self._evicted.add(client)             # moved to host: PREFETCH at its next grant
        book.last_used.setdefault(client, now)
        self._queue.resize(client)
        book.sync(self, client)
        return actions + self._step(now)

    # -- hooks of the arbiter's events ----------------------------------------------------------
    def _res_granted(self: Arbiter, client: Client, now: float) -> None:
        book = self._res
        book.end_reclaim(client)
        book.set(client, 0)
        book.refused.discard(client)
        book.after_release.pop(client, None)
        book.last_used[client] = now
        book.sync(self, client)

    def _res_dropped(self: Arbiter, client: Client, evict_mib: int) -> None:
        """A holder dropped with EVICT of evict_mib (0: all): until its report says what stays, it
        keeps what that leaves."""
        if evict_mib:
            self._res.after_release[client] = kept_after_eviction(
                self._footprints.get(client, 0), evict_mib)

    def _res_released(self: Arbiter, client: Client, now: float) -> None:
        """After the holder's release: what it leaves on the GPU."""
        book = self._res
        report = book.after_release.pop(client, None)
        if client not in book.swappable:
            return
        if self._strikes.barred(owner_key(self, client), now):
            resident = 0                  # its owner lost idle residency (backoff.py)
        elif client in self._evicted:   # its drop carried EVICT (its footprint may have shrunk since)
            resident = min(report or 0, self._footprints.get(client, 0))
        else:
            resident = self._footprints.get(client, 0)
        book.set(client, resident)
        book.last_used[client] = now
        book.sync(self, client)

    def _res_resized(self: Arbiter, client: Client, nbytes: int) -> None:
        """The client's footprint becomes `nbytes` (before the wait queue hears of it)."""
        book = self._res
        if book.parked.get(client, 0) > nbytes:
            book.set(client, nbytes)
            book.sync(self, client)

    def _expire_reclaims(self: Arbiter, now: float) -> list[Action]:
        """Reclaims silent EVICT_AFTER_QUANTA quanta: Evict, as for a silent holder (the caller
        closes the connection); the client's bytes are forgotten and it waits no longer."""
        book = self._res
        if not book.reclaiming:
            return []
        actions: list[Action] = []
        for client, waited in book.due(now):
            book.set(client, 0)
            if self._queue.remove(client) is not None:
                self._shares.contend(client, -1)
            book.sync(self, client)
            actions += [Evict(client, waited), strike(self, client, waited, now)]
        if actions:
            self._shares.rescale(self, now)
        return actions
