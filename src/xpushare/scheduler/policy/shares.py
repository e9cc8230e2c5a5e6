"""Compute shares of one GPU's clients, and the quanta they scale (the arbiter's ShareBook).

Every client has a share (DEFAULT_SHARE unless set, forgotten at its disconnect). The clients
contending for the GPU are its holders and waiters; the book counts them per distinct share
(`contending`, a handful of entries in practice), so their exact mean share is a sum over those
few (Fractions: equal shares then give a ratio of exactly 1) and nothing is summed per event.

A holder's quantum is tq times its share over the contenders' mean share (model.scaled_quantum,
which bounds it), tq itself while all contenders have the same share. It is worked out at the
grant, and again when the contenders' mean share changes (rescale: a request, release, disconnect,
eviction or set_share): the holders with a quantum under way (`quantum_start`) get the deadline
start + their new quantum, O(k log h) for the k of them, nothing when the mean did not change, as
always with equal shares. So two clients of shares 30 and 70 taking turns get quanta of 0.6 tq and
1.4 tq whichever of them happens to be waiting at the other's grant.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from .model import DEFAULT_SHARE, Client, Mode, scaled_quantum

if TYPE_CHECKING:
    from .arbiter import Arbiter

_UNIFORM = Fraction(1)  # the mean share quanta are worked from while all contenders have one share


class ShareBook:
    def __init__(self):
        self.shares: dict[Client, float] = {}          # set shares (missing: DEFAULT_SHARE)
        self.contending: dict[float, int] = {}         # share -> holders and waiters that have it
        self.count = 0                                 # holders and waiters
        self.mean_used: Fraction | None = None         # the mean the running quanta were worked from
        self.quantum_start: dict[Client, float] = {}   # holders with a quantum under way: its start

    def share(self, client: Client) -> float:
        return self.shares.get(client, DEFAULT_SHARE)

    def contend(self, client: Client, delta: int) -> None:
        """The client joins (+1) or leaves (-1) the holders and waiters."""
        self._count(self.share(client), delta)
        self.count += delta

    def set(self, client: Client, share: float, contending: bool) -> float:
        """Set a checked share; returns the old one. `contending`: the client holds or waits."""
        old = self.share(client)
        if share == DEFAULT_SHARE:
            self.shares.pop(client, None)
        else:
            self.shares[client] = share
        if contending and share != old:
            self._count(old, -1)
            self._count(share, 1)
        return old

    def forget(self, client: Client) -> None:
        self.shares.pop(client, None)
        self.quantum_start.pop(client, None)

    def mean(self) -> Fraction | None:
        """The contenders' exact mean share; None when nobody contends."""
        if not self.count:
            return None
        return sum(Fraction(s) * n for s, n in self.contending.items()) / self.count

    def ratio(self, client: Client) -> float:
        """The client's share over the contenders' mean share: exactly 1.0 while every contender
        has the same share. O(D) in the D distinct shares."""
        if len(self.contending) <= 1 or not self.count:
            return 1.0
        return float(Fraction(self.share(client)) / self.mean())

    def quantum(self, tq: float, client: Client) -> float:
        """The quantum a grant to `client` carries now, in a mode with quanta."""
        if len(self.contending) <= 1:
            return tq
        return scaled_quantum(tq, self.ratio(client))

    def rescale(self, arb: Arbiter, now: float) -> None:
        """The contenders may have changed: when their mean share did, the holders with a quantum
        under way get the deadline its start plus their new quantum (one whose new quantum is
        already over expires at once, as at its deadline). O(D) when the mean is unchanged, which
        it always is while every contender has the same share."""
        mean = _UNIFORM if len(self.contending) <= 1 else self.mean()
        if mean == self.mean_used:
            return
        self.mean_used = mean
        if arb.mode == Mode.OFF:   # no quanta
            return
        held = arb._held
        for client, start in list(self.quantum_start.items()):
            h = held.records.get(client)
            if h is None or h.drop_sent is not None or h.expired or h.deadline is None:
                del self.quantum_start[client]   # no quantum under way any more
                continue
            deadline = start + arb.quantum_of(client)
            if deadline <= now:   # its new quantum is over: it expires as at its deadline
                held.arm(client, h, None)
                held.set_expired(client, h, True)
                del self.quantum_start[client]
            elif deadline != h.deadline:
                held.arm(client, h, deadline)

    def lone(self) -> None:
        """One contender, just granted on the arbiter's fast path: its quantum is tq."""
        self.mean_used = _UNIFORM

    def _count(self, share: float, delta: int) -> None:
        n = self.contending.get(share, 0) + delta
        if n:
            self.contending[share] = n
        else:
            del self.contending[share]
