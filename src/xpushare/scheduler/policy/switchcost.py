"""What a switch of one GPU costs, as measured, and the dynamic quantum that follows from it.

Two measurements, each kept per client so that no one client can move the quantum on its own:
- the handoff, DROP_LOCK sent to LOCK_RELEASED (the arbiter's own clock), for drops that were
  switches (SWITCH_REASONS);
- the bulk prefetch a client reports in LOCK_RELEASED, counted only for a grant that carried
  PREFETCH, cut to what is plausible for its footprint (plausible_prefetch).
Each client's samples make an EWMA; the GPU's cost is the lower median of the clients' averages
(median.LowerMedian), the prefetch part only once SWITCH_REPORTERS clients have one.

The effective quantum is the explicit one, else QUANTA_PER_SWITCH switch costs within
[TQ_FLOOR, TQ_CEILING] (DEFAULT_DYNAMIC_TQ before any switch was measured). The strategies read it
several times per event, so it is worked out again only after what it depends on changed.
"""

from __future__ import annotations

from .median import LowerMedian
from .model import (
    DEFAULT_DYNAMIC_TQ, EWMA_ALPHA, QUANTA_PER_SWITCH, SWITCH_REASONS, SWITCH_REPORTERS,
    TQ_CEILING, TQ_FLOOR, Client, Holding, SwitchReport, check_tq, plausible_prefetch,
)


def _ewma(average: float | None, sample: float) -> float:
    return sample if average is None else EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * average


class SwitchCosts:
    def __init__(self, tq: float | None = None):
        self.explicit = None if tq is None else check_tq(tq)  # None: the dynamic quantum
        self.handoffs = LowerMedian()          # each client's average DROP_LOCK -> RELEASED
        self.prefetches = LowerMedian()        # each client's average bulk prefetch, seconds
        self.prefetching: set[Client] = set()  # holders granted with PREFETCH
        self._tq: float | None = None          # tq's value; None: to be worked out

    @property
    def prefetch_cost(self) -> float | None:
        if len(self.prefetches) < SWITCH_REPORTERS:
            return None
        return self.prefetches.median()

    @property
    def handoff_cost(self) -> float | None:
        return self.handoffs.median()

    @property
    def switch_cost(self) -> float | None:
        prefetch, handoff = self.prefetch_cost, self.handoff_cost
        if handoff is None and prefetch is None:
            return None
        return (handoff or 0.0) + (prefetch or 0.0)

    @property
    def tq(self) -> float:
        tq = self._tq
        if tq is None:
            tq = self._tq = self._work_out_tq()
        return tq

    def _work_out_tq(self) -> float:
        if self.explicit is not None:
            return self.explicit
        cost = self.switch_cost
        if cost is None:
            return DEFAULT_DYNAMIC_TQ
        return min(TQ_CEILING, max(TQ_FLOOR, QUANTA_PER_SWITCH * cost))

    def changed(self) -> None:
        """Something tq depends on changed (also for tests that set averages directly)."""
        self._tq = None

    def set_explicit(self, tq: float | None) -> None:
        self.explicit = None if tq is None else check_tq(tq)
        self.changed()

    def granted(self, client: Client, prefetch: bool) -> None:
        if prefetch:
            self.prefetching.add(client)
        else:
            self.prefetching.discard(client)

    def released(self, client: Client, h: Holding, report: SwitchReport | None, footprint: int,
                 now: float) -> None:
        """The holder `h` released at `now` with `report`: its handoff, when it was told to drop
        for a switch, and its prefetch, when its grant carried PREFETCH."""
        if h.drop_sent is not None and h.drop_reason in SWITCH_REASONS:
            sample = max(0.0, now - h.drop_sent)
            self.handoffs.set(client, _ewma(self.handoffs.get(client), sample))
            self.changed()
        if client in self.prefetching:
            self.prefetching.discard(client)
            sample = plausible_prefetch(report.prefetch if report else 0.0, footprint)
            if sample > 0:
                self.prefetches.set(client, _ewma(self.prefetches.get(client), sample))
                self.changed()

    def forget(self, client: Client) -> None:
        self.prefetching.discard(client)
        self.prefetches.discard(client)
        self.handoffs.discard(client)
        self.changed()
