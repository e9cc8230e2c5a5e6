"""The holders of one GPU, with what the policy asks of them at every event kept ready.

- `records` (client -> Holding, grant order) is what the arbiter shows as `holders`.
- `live` (the holders not draining, grant order), `expired` (live holders whose quantum ran out
  and that were not dropped) and `rearmed` (the expired ones with a deadline) are kept as holders
  change state, so a step never filters all holders for them.
- The footprints of all holders and of the live ones are running sums (raw bytes; the arbiter
  adds its per-client overhead), kept as holders come, drain, go and change footprint.
- `live_shares` counts the live holders of each compute share (share -> how many), kept as holders
  come, drain, go and change share, so that AUTO admission knows at once whether a waiter's share
  differs from a running holder's.
- Deadlines sit in a heap with lazy deletion: an entry counts while its holder still holds with
  that deadline. next_deadline() and due() cost O(log h) per entry, amortised (the heap is rebuilt
  when it holds more than twice its holders).

Every change of a holder's deadline or expiry goes through arm() and set_expired(); a Holding's
drop_sent is set by the arbiter, which then calls draining().
"""

from __future__ import annotations

import heapq
import itertools

from .model import DEFAULT_SHARE, Client, Holding


class HolderIndex:
    """The holders; `footprints` and `shares` are the arbiter's dicts of footprints (client ->
    bytes) and compute shares (client -> share, missing = DEFAULT_SHARE)."""

    def __init__(self, footprints: dict[Client, int], shares: dict[Client, float] | None = None):
        self.records: dict[Client, Holding] = {}
        self.live: dict[Client, None] = {}
        self.expired: dict[Client, None] = {}
        self.rearmed: dict[Client, None] = {}
        self.footprint_all = 0     # raw bytes of every holder
        self.footprint_live = 0    # raw bytes of the live ones
        self.live_shares: dict[float, int] = {}
        self._footprints = footprints
        self._shares = {} if shares is None else shares
        self._timers: list[tuple[float, int, Client, Holding]] = []
        self._ties = itertools.count()   # heap entries never compare clients

    def add(self, client: Client, h: Holding) -> None:
        """A new holder, not draining (its deadline as set in `h`)."""
        self.records[client] = h
        self.live[client] = None
        fp = self._footprints.get(client, 0)
        self.footprint_all += fp
        self.footprint_live += fp
        self._count_share(self._shares.get(client, DEFAULT_SHARE), 1)
        self.arm(client, h, h.deadline)

    def remove(self, client: Client) -> Holding | None:
        h = self.records.pop(client, None)
        if h is not None:
            fp = self._footprints.get(client, 0)
            self.footprint_all -= fp
            if client in self.live:
                del self.live[client]
                self.footprint_live -= fp
                self._count_share(self._shares.get(client, DEFAULT_SHARE), -1)
            self.expired.pop(client, None)
            self.rearmed.pop(client, None)
        return h

    def draining(self, client: Client) -> None:
        """The holder was told to drop."""
        if client in self.live:
            del self.live[client]
            self.footprint_live -= self._footprints.get(client, 0)
            self._count_share(self._shares.get(client, DEFAULT_SHARE), -1)
        self.expired.pop(client, None)
        self.rearmed.pop(client, None)

    def reshare(self, client: Client, old: float, new: float) -> None:
        """The client's compute share is changing from `old` to `new`."""
        if client in self.live and old != new:
            self._count_share(old, -1)
            self._count_share(new, 1)

    def _count_share(self, share: float, delta: int) -> None:
        n = self.live_shares.get(share, 0) + delta
        if n:
            self.live_shares[share] = n
        else:
            del self.live_shares[share]

    def resize(self, client: Client, old: int, new: int) -> None:
        """The client's footprint is changing from `old` to `new` raw bytes."""
        if client in self.records:
            self.footprint_all += new - old
            if client in self.live:
                self.footprint_live += new - old

    def arm(self, client: Client, h: Holding, deadline: float | None) -> None:
        h.deadline = deadline
        if deadline is not None and client in self.expired:
            self.rearmed[client] = None
        else:
            self.rearmed.pop(client, None)
        if deadline is None:
            return
        heapq.heappush(self._timers, (deadline, next(self._ties), client, h))
        if len(self._timers) > 2 * len(self.records) + 16:
            self._timers = [(x.deadline, next(self._ties), c, x)
                            for c, x in self.records.items() if x.deadline is not None]
            heapq.heapify(self._timers)

    def set_expired(self, client: Client, h: Holding, expired: bool) -> None:
        h.expired = expired
        if expired:
            self.expired[client] = None
            if h.deadline is not None:
                self.rearmed[client] = None
        else:
            self.expired.pop(client, None)
            self.rearmed.pop(client, None)

    def _valid(self, entry: tuple[float, int, Client, Holding]) -> bool:
        deadline, _, client, h = entry
        return self.records.get(client) is h and h.deadline == deadline

    def next_deadline(self) -> float | None:
        timers = self._timers
        while timers and not self._valid(timers[0]):
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def due(self, now: float) -> list[tuple[Client, Holding]]:
        """The holders whose deadline is at or before `now`, in grant order; their entries are
        consumed (the caller gives each a new deadline or none)."""
        found: dict[Client, Holding] = {}
        timers = self._timers
        while timers and timers[0][0] <= now:
            entry = heapq.heappop(timers)
            if self._valid(entry):
                found[entry[2]] = entry[3]
        return sorted(found.items(), key=lambda item: item[1].seq)
