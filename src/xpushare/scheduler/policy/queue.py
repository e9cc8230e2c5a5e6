"""The waiters of one GPU, kept so that no event has to rescan or sort them all.

Waiters are served by effective priority (base priority plus one per AGING_QUANTA quanta waited),
then arrival (seq). Both parts of that order move with `now` and with the quantum, so no order is
stored; what is stored makes the order cheap to produce lazily:

- The waiters are grouped by base priority (a _Group each; only priorities somebody waits at have
  one, P of them, a handful in practice). Within a group, effective priority depends only on
  `since`, and does not rise as `since` does (the same floating-point expression, monotone).
- A group keeps in `regular` (an OrderedDict: O(1) append, removal and first) the waiters whose
  `since` and `seq` both rise in its order: there, serving order is that order, whatever `now` and
  the quantum. A waiter that does not keep both rising (a preempted client resuming an earlier
  wait, a change of priority moving an older waiter into the group, time stepping back) goes to
  `odd`, sorted when the group is read: r such waiters, few, since preemptions are.
- ordered(now, q) merges the groups lazily (heapq.merge): O(P + r log r) to start, O(log P) per
  waiter produced. The first waiter in serving order (head) costs the start alone.
- Each group keeps its regular waiters' footprints in a segment tree over their slots (joining
  order, so `since` rises along them): the smallest footprint among the waiters aged to at least
  some level, a prefix of the slots found by bisection, is O(log n) (plus O(r) for the odd ones).
  Admission uses it to stop as soon as no waiter left that is not outranked could fit.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator

from .model import Client, Waiting

INF = math.inf


class _Group:
    """The waiters of one base priority.

    `regular` holds the waiters in the order they joined, as long as their `since` and `seq` both
    rise (checked against the last one that joined); `odd` holds the others. Each regular waiter
    has a slot (its position in joining order, `slot`); `sinces` keeps every slot's `since` (rising)
    and `tree` a segment tree of the slots' footprints (INF for slots left), so that the smallest
    footprint among the regular waiters aged to at least some level (a prefix of the slots) is
    O(log n). The slots are renumbered when they run out (amortised O(1) per waiter).
    """
    __slots__ = ("regular", "odd", "slot", "sinces", "last_seq", "tree", "cap", "hidden")

    def __init__(self):
        self.regular: OrderedDict[Client, Waiting] = OrderedDict()
        self.odd: dict[Client, Waiting] = {}
        self.slot: dict[Client, int] = {}
        self.sinces: list[float] = []
        self.last_seq = -1
        self.cap = 8
        self.tree: list[float] = [INF] * (2 * self.cap)
        self.hidden: set[Client] = set()   # odd waiters granted by the step under way

    def add(self, client: Client, w: Waiting, footprint: int) -> None:
        if not self.regular and self.sinces:   # every slot is free (INF): start afresh
            self.sinces, self.last_seq = [], -1
        if self.sinces and (w.seq < self.last_seq or w.since < self.sinces[-1]):
            self.odd[client] = w
            return
        if len(self.sinces) == self.cap:
            self._renumber()
        self.regular[client] = w
        self.slot[client] = len(self.sinces)
        self.sinces.append(w.since)
        self.last_seq = w.seq
        self.set(client, footprint)

    def discard(self, client: Client) -> None:
        if self.regular.pop(client, None) is not None:
            self._put(self.slot.pop(client), INF)
        else:
            self.odd.pop(client, None)
            self.hidden.discard(client)

    def set(self, client: Client, footprint: float) -> None:
        """A regular waiter's footprint (INF: not to be counted any more)."""
        if client in self.slot:
            self._put(self.slot[client], footprint)
        elif footprint == INF:
            self.hidden.add(client)

    def _renumber(self) -> None:
        footprints = {c: self.tree[self.cap + i] for c, i in self.slot.items()}
        self.cap = max(8, 2 * len(self.regular))
        self.tree = [INF] * (2 * self.cap)
        self.slot, self.sinces = {}, []
        for c, w in self.regular.items():
            self.slot[c] = len(self.sinces)
            self.sinces.append(w.since)
            self.tree[self.cap + self.slot[c]] = footprints[c]
        for i in range(self.cap - 1, 0, -1):
            self.tree[i] = min(self.tree[2 * i], self.tree[2 * i + 1])

    def _put(self, i: int, value: float) -> None:
        tree = self.tree
        i += self.cap
        tree[i] = value
        i >>= 1
        while i:
            tree[i] = min(tree[2 * i], tree[2 * i + 1])
            i >>= 1

    def _prefix_min(self, end: int) -> float:
        """The smallest footprint of slots [0, end)."""
        tree, best = self.tree, INF
        lo, hi = self.cap, self.cap + end
        while lo < hi:
            if lo & 1:
                best = min(best, tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                best = min(best, tree[hi])
            lo >>= 1
            hi >>= 1
        return best

    def __bool__(self) -> bool:
        return bool(self.regular) or bool(self.odd)

    def top_since(self) -> float:
        """The earliest `since` in the group: its waiter has the group's highest effective
        priority."""
        first = self.regular[next(iter(self.regular))].since if self.regular else math.inf
        return min([first, *(w.since for w in self.odd.values())])

    def min_footprint(self, aged: Callable[[float], bool], footprints: dict[Client, int]) -> float:
        """The smallest footprint among the waiters for which aged(since) holds (true on a prefix
        of the regular slots), hidden ones left out: O(log n + r)."""
        end = bisect.bisect_left(self.sinces, True, key=lambda since: not aged(since))
        best = self._prefix_min(end)
        for c, w in self.odd.items():
            if c not in self.hidden and aged(w.since):
                best = min(best, footprints.get(c, 0))
        return best

    def ordered(self, base: int, now: float, q: float) -> Iterator[tuple[int, int, Client]]:
        """(-effective priority, seq, client) of the group's waiters, in serving order."""
        def key(w: Waiting) -> int:
            return -(base + math.floor(max(0.0, now - w.since) / q))

        regular = ((key(w), w.seq, c) for c, w in self.regular.items())
        if not self.odd:
            return regular
        return heapq.merge(regular, sorted((key(w), w.seq, c) for c, w in self.odd.items()))


class WaitQueue:
    """The waiters: `records` (client -> Waiting, arrival order) and the groups described above.
    `footprints` is the arbiter's dict of footprints (client -> bytes, missing = 0)."""

    def __init__(self, footprints: dict[Client, int]):
        self.records: dict[Client, Waiting] = {}
        self._footprints = footprints
        self._groups: dict[int, _Group] = {}
        self._group_of: dict[Client, int] = {}

    def add(self, client: Client, w: Waiting, priority: int) -> None:
        self.records[client] = w
        self._join(client, w, priority)

    def remove(self, client: Client) -> Waiting | None:
        w = self.records.pop(client, None)
        if w is not None:
            self._leave(client)
        return w

    def reprioritize(self, client: Client, priority: int) -> None:
        w = self.records.get(client)
        if w is not None and self._group_of[client] != priority:
            self._leave(client)
            self._join(client, w, priority)

    def resize(self, client: Client) -> None:
        """The client's footprint changed."""
        if client in self.records:
            self._groups[self._group_of[client]].set(client, self._footprints.get(client, 0))

    def hide(self, client: Client) -> None:
        """Leave a waiter out of min_footprint: the step under way grants it (and removes it)."""
        self._groups[self._group_of[client]].set(client, INF)

    def _join(self, client: Client, w: Waiting, priority: int) -> None:
        group = self._groups.get(priority)
        if group is None:
            group = self._groups[priority] = _Group()
        group.add(client, w, self._footprints.get(client, 0))
        self._group_of[client] = priority

    def _leave(self, client: Client) -> None:
        priority = self._group_of.pop(client)
        group = self._groups[priority]
        group.discard(client)
        if not group:
            del self._groups[priority]

    # -- reading ------------------------------------------------------------------------------
    def ordered(self, now: float, q: float) -> Iterator[tuple[int, int, Client]]:
        """(-effective priority, seq, client) of every waiter, in serving order, lazily; `q` is
        AGING_QUANTA quanta. The queue must not change while this is read."""
        streams = [g.ordered(p, now, q) for p, g in self._groups.items()]
        return streams[0] if len(streams) == 1 else heapq.merge(*streams)

    def head(self, now: float, q: float) -> Client | None:
        """The first waiter in serving order."""
        first = next(self.ordered(now, q), None)
        return None if first is None else first[2]

    def top_priorities(self, now: float, q: float) -> dict[int, int]:
        """Base priority -> the highest effective priority of the group's waiters."""
        return {p: p + math.floor(max(0.0, now - g.top_since()) / q)
                for p, g in self._groups.items()}

    def any_fits(self, room: float, at_least: int | None, tops: dict[int, int], now: float,
                 q: float) -> bool:
        """Whether some waiter not hidden whose effective priority is at least `at_least` (None:
        any) has a footprint of at most `room`: O(P log n). A group is looked at while its highest
        effective priority (`tops`, from top_priorities) reaches at_least."""
        for priority, top in tops.items():
            if at_least is not None and top < at_least:
                continue
            if self.min_footprint(priority, at_least, now, q) <= room:
                return True
        return False

    def min_footprint(self, priority: int, at_least: int | None, now: float, q: float) -> float:
        """The smallest footprint among the waiters of that base priority whose effective priority
        is at least `at_least` (None: all), those hidden left out; INF if none."""
        group = self._groups.get(priority)
        if group is None:
            return INF
        if at_least is None or at_least <= priority:
            return group.min_footprint(lambda since: True, self._footprints)
        level = at_least - priority
        return group.min_footprint(
            lambda since: math.floor(max(0.0, now - since) / q) >= level, self._footprints)
