"""The lower median of one value per client, kept in two heaps so that setting or forgetting a
client's value costs O(log n) amortised and reading the median O(1) amortised, n the clients with a
value (the dynamic quantum's prefetch estimate, arbiter.py: a median, so that no single client's
report can move it).

The lower half lives in a max-heap, the upper half in a min-heap, the lower half holding one more
when n is odd: its top is the lower median (statistics.median_low). A value replaced or forgotten
stays in its heap, marked dead by its entry number, until it reaches a top or the heaps are rebuilt
(when dead entries outnumber live ones).
"""

from __future__ import annotations

import heapq
import itertools

from .model import Client


class LowerMedian:
    def __init__(self):
        self._values: dict[Client, tuple[float, int]] = {}  # client -> (value, entry number)
        self._lower: dict[Client, bool] = {}                # client -> its entry is in the low half
        self._low: list[tuple[float, int, Client]] = []     # (-value, entry, client): a max-heap
        self._high: list[tuple[float, int, Client]] = []    # (value, entry, client)
        self._n_low = self._n_high = 0                      # live entries in each
        self._entries = itertools.count()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, client: Client) -> float | None:
        v = self._values.get(client)
        return None if v is None else v[0]

    def median(self) -> float | None:
        """The lower median of the values; None when there are none."""
        top = self._top(self._low)
        return None if top is None else -top[0]

    def set(self, client: Client, value: float) -> None:
        self.discard(client)
        entry = next(self._entries)
        self._values[client] = (value, entry)
        top = self._top(self._low)
        if top is not None and value <= -top[0]:
            heapq.heappush(self._low, (-value, entry, client))
            self._n_low += 1
            self._lower[client] = True
        else:
            heapq.heappush(self._high, (value, entry, client))
            self._n_high += 1
            self._lower[client] = False
        self._balance()

    def discard(self, client: Client) -> None:
        if self._values.pop(client, None) is None:
            return
        if self._lower.pop(client):
            self._n_low -= 1
        else:
            self._n_high -= 1
        self._balance()
        if len(self._low) + len(self._high) > 2 * len(self._values) + 16:
            self._low = [e for e in self._low if self._live(e)]
            self._high = [e for e in self._high if self._live(e)]
            heapq.heapify(self._low)
            heapq.heapify(self._high)

    def _live(self, e: tuple[float, int, Client]) -> bool:
        v = self._values.get(e[2])
        return v is not None and v[1] == e[1]

    def _top(self, heap: list) -> tuple[float, int, Client] | None:
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _balance(self) -> None:
        while self._n_low > self._n_high + 1:
            self._top(self._low)
            value, entry, client = heapq.heappop(self._low)
            heapq.heappush(self._high, (-value, entry, client))
            self._n_low, self._n_high = self._n_low - 1, self._n_high + 1
            self._lower[client] = False
        while self._n_high > self._n_low:
            self._top(self._high)
            value, entry, client = heapq.heappop(self._high)
            heapq.heappush(self._low, (-value, entry, client))
            self._n_low, self._n_high = self._n_low + 1, self._n_high - 1
            self._lower[client] = True
