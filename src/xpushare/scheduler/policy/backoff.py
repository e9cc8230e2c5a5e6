"""Clients that keep others waiting on their EVICT answers, and what they lose for it.

Residency is the scheduler's to grant: a client counts bytes on the GPU while it does not hold
only because a release left them there (residency.py), and what it reports can lower them, never
raise them. What is left to a client that wants to make others wait is to be slow: to answer EVICT
late, not at all (and reconnect), or to hold its lock past a drop. Each of those is a strike
against its owner (its user: every client of that uid, the connections it makes later included):

- a reclaim answered more than LATE_ANSWER_QUANTA quanta after it was sent (an honest move takes
  a small part of one: the dynamic quantum is QUANTA_PER_SWITCH switches, and a client that moves
  more slowly than that is not worth keeping idle on the GPU);
- a reclaim not answered at all (the client is evicted, residency.py);
- a holder that answers EVICT evicted for not releasing after DROP_LOCK (arbiter.py).

With strikes, the owner's clients lose their idle residency on this GPU for BACKOFF_QUANTA quanta,
doubled with every further strike up to 2**BACKOFF_DOUBLINGS times that: what they keep on the
GPU while they do not hold is not counted against others and is never asked for (as for a client
that does not answer EVICT), so no waiter waits for them. A timely answer takes one strike away.
So a loop of slow answers ends: each costs a waiter at most the time of one answer, and the time
between two of them doubles.

Cost: O(1) per answer; a strike O(k) in the owner's k clients on the GPU. One entry per owner with
strikes (owners are uids: bounded by the users of the node; a client with no owner is its own, and
forgotten with it).
"""

from __future__ import annotations

from collections.abc import Hashable

from .model import Backoff, Client

LATE_ANSWER_QUANTA = 1    # an EVICT answered later than this many quanta is a strike
BACKOFF_QUANTA = 4        # quanta a first strike takes the owner's idle residency away ...
BACKOFF_DOUBLINGS = 6     # ... doubled with each further strike, at most this many times


class Strikes:
    """The owners with strikes on one GPU: owner -> (strikes, barred until)."""

    def __init__(self):
        self._of: dict[Hashable, tuple[int, float]] = {}

    def barred(self, owner: Hashable, now: float) -> bool:
        """Whether the owner's clients have lost their idle residency at `now`."""
        entry = self._of.get(owner)
        return entry is not None and now < entry[1]

    def strike(self, owner: Hashable, now: float, tq: float) -> float:
        """One more strike: the seconds from `now` the owner's clients lose idle residency."""
        strikes = self._of.get(owner, (0, 0.0))[0] + 1
        seconds = BACKOFF_QUANTA * tq * 2 ** min(strikes - 1, BACKOFF_DOUBLINGS)
        self._of[owner] = (strikes, now + seconds)
        return seconds

    def timely(self, owner: Hashable, now: float) -> None:
        """A timely answer: one strike less (the bar under way stays)."""
        entry = self._of.get(owner)
        if entry is None:
            return
        strikes, until = entry
        if strikes > 1 or now < until:
            self._of[owner] = (max(0, strikes - 1), until)
        else:
            del self._of[owner]

    def forget(self, client: Client) -> None:
        """A client with no owner left (it was its own owner)."""
        self._of.pop(("client", client), None)


def owner_key(arb, client: Client) -> Hashable:
    """Whose strikes a client's slowness counts toward: its owner, else itself."""
    mine = arb._owners.of.get(client)
    return ("client", client) if mine is None or mine[0] is None else ("owner", mine[0])


def owned_alike(arb, client: Client) -> list[Client]:
    """The clients on the GPU whose strikes are the client's (its owner's, itself included)."""
    key = owner_key(arb, client)
    return [client] if key[0] == "client" else list(arb._owners.clients_of(key[1]))


def answered_in(arb, client: Client, waited: float, now: float) -> list[Backoff]:
    """The client answered its reclaim `waited` seconds after it: late, a strike."""
    if waited <= LATE_ANSWER_QUANTA * arb.tq:
        arb._strikes.timely(owner_key(arb, client), now)
        return []
    return [strike(arb, client, waited, now)]


def strike(arb, client: Client, waited: float, now: float) -> Backoff:
    """A strike against the client's owner: its clients' idle bytes on the GPU count no more."""
    seconds = arb._strikes.strike(owner_key(arb, client), now, arb.tq)
    book = arb._res
    for c in owned_alike(arb, client):
        if c in book.parked and c not in arb.holders:
            book.set(c, 0)
            arb._queue.resize(c)
            book.sync(arb, c)
    return Backoff(client, waited, seconds)
