"""One user's clients among themselves: the order their own priorities ask for (declared.py).

Against other users a client's priority is what declared.py lets it claim, so a process's own
declaration above the default counts as the default there. Among the waiters of one owner (a
user) at one base priority, though, its own priority (what it declared) still decides who goes
first: when one of them joins the waiters, they take the places that owner's waiters hold, in
serving order, highest own priority first (ties: as they were). The places an owner holds do not
change, so no other owner's turn moves: reordering can raise no one over another user. Within the
owner it is strict, as its user asked: a waiter of lower own priority goes after every one of
higher own priority that keeps asking.

Cost: nothing while all of an owner's clients on the GPU declared one own priority (the common
case: a thousand processes of one user ask without anything to reorder, so a request must not
look at the others); otherwise O(k log k), k the owner's clients or the waiters, whichever are
fewer, when one of them joins the waiters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import TYPE_CHECKING

from .model import Client

if TYPE_CHECKING:
    from .arbiter import Arbiter


class Owners:
    def __init__(self):
        self.of: dict[Client, tuple[Hashable, int]] = {}   # client -> (owner, own priority)
        self._clients: dict[Hashable, set[Client]] = {}     # owner -> its clients
        self._owns: dict[Hashable, Counter] = {}            # owner -> own priority -> clients

    def set(self, client: Client, owner: Hashable | None, own: int) -> None:
        """The client's owner (None: none, ordered by its priority alone) and own priority."""
        self.forget(client)
        if owner is not None:
            self.of[client] = (owner, own)
            self._clients.setdefault(owner, set()).add(client)
            self._owns.setdefault(owner, Counter())[own] += 1

    def clients_of(self, owner: Hashable) -> set[Client]:
        return self._clients.get(owner, set())

    def forget(self, client: Client) -> None:
        old = self.of.pop(client, None)
        if old is not None:
            mine = self._clients[old[0]]
            mine.discard(client)
            owns = self._owns[old[0]]
            owns[old[1]] -= 1
            if not owns[old[1]]:
                del owns[old[1]]
            if not mine:
                del self._clients[old[0]], self._owns[old[0]]

    def reorder(self, arb: Arbiter, client: Client) -> None:
        """`client` has just joined the waiters: its owner's waiters at its base priority take
        their places anew (the module's docstring)."""
        mine = self.of.get(client)
        if mine is None or len(self._owns[mine[0]]) < 2:
            return  # one own priority among them all: nothing to reorder
        base, waiting, of = arb.priority(client), arb.waiting, self.of
        owner, clients = mine[0], self._clients[mine[0]]
        if len(waiting) < len(clients):
            peers = [c for c in waiting if of.get(c, (None,))[0] == owner
                     and arb.priority(c) == base]
        else:
            peers = [c for c in clients if c in waiting and arb.priority(c) == base]
        if len(peers) < 2 or len({self.of[c][1] for c in peers}) < 2:
            return
        places = sorted((waiting[c] for c in peers), key=lambda w: (w.since, w.seq))
        order = sorted(peers, key=lambda c: (-self.of[c][1], waiting[c].since, waiting[c].seq))
        queue = arb._queue
        for c in peers:
            queue.remove(c)
        for c, w in zip(order, places):
            queue.add(c, w, base)
