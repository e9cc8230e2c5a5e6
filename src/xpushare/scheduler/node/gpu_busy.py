"""What the clients of one GPU claim of its time together, and how it is shared out when they ran
at the same time (docs/metrics.md, "GPU busy time per client").

A client's library measures the spans in which its work kept the GPU busy, on the GPU's clock.
When contexts run together the GPU time-slices between them, so each one's spans also hold the
others' slices and their claims add up to more than the GPU had. Two ways to tell whose time it
was, by what the client sent:
- with BUSY_SPANS (its spans on the host's clock): each span is shared out by the stretch. Where
  the spans open at once (its own and the other clients') are busier together than the GPU can be
  (their densities, GPU time over length, add up to more than 1), each gets its part of the
  stretch in proportion to its density; elsewhere it keeps what it measured (spans that touch on
  the host without filling the GPU, as with launch gaps). The GPU gives the contexts that have
  work equal slices, so spans measured while they overlap, each holding the others' slices, get
  equal parts; bench/busy_accuracy.py measures the result against the kernels' native time;
- with BUSY_UPDATE alone (an older library): by rates over the reports' intervals, which keeps
  the sum within the GPU's time but cannot tell overlapping bursts from alternating ones.
Whatever either says, the GPU's clients are never credited more than the wall time since the first
of them attached.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .metrics import LockStats

# A BUSY_UPDATE may claim at most the wall time since the previous one (or since the ATTACH) times
# this, plus BUSY_SLACK_S: the client measures on the GPU's clock, the scheduler on its own, and a
# report is sent a little after the spans it counts ended.
BUSY_SLACK = 1.10
BUSY_SLACK_S = 0.01
# The window over which the GPU time a client achieved is shown (status, top, the exporter): long
# enough to span several quanta of the library's reports (about one a second), short enough to
# follow a change of limit or share.
BUSY_WINDOW = 10.0
# A span may start this long before the client's previous report arrived (the library cuts an
# open span at its own clock's report time, which the scheduler sees a little later).
SPAN_EARLY_S = 1.0
SPANS_PENDING = 64   # spans kept for the next BUSY_UPDATE at most (the last ones are joined)

Span = tuple[float, float, float]  # start, end (host monotonic seconds), GPU seconds in it


def seen(stats: LockStats, now: float) -> None:
    """The client's credited total at `now`, for its busy ratio over BUSY_WINDOW."""
    kept = stats.busy_seen
    kept.append((now, stats.busy))
    while len(kept) > 2 and kept[1][0] <= now - BUSY_WINDOW:
        kept.popleft()


def valid_spans(spans: list[tuple[int, int, int]], since: float, now: float) -> list[Span] | None:
    """BUSY_SPANS' spans (ns) as seconds, or None when they break a rule (docs/protocol.md): in
    order, each ending after it starts, after the previous one, within [since - SPAN_EARLY_S,
    now]. A span that claims more GPU time than its length counts as busy all along (GPU time
    retired late, after an idle point that did not wait: what it claims is the BUSY_UPDATE's)."""
    out: list[Span] = []
    last = since - SPAN_EARLY_S
    for start_ns, end_ns, busy_ns in spans:
        start, end, busy = start_ns / 1e9, end_ns / 1e9, busy_ns / 1e9
        if not (last <= start < end <= now + BUSY_SLACK_S):
            return None
        out.append((start, end, min(busy, end - start)))
        last = end
    return out


def keep_spans(pending: list[Span], spans: list[Span]) -> None:
    """Adds spans for the next BUSY_UPDATE; past SPANS_PENDING, the two closest are joined (the
    least idle time taken in; of those, the shortest pair), as often as needed, as the library
    does."""
    pending.extend(spans)
    while len(pending) > SPANS_PENDING:
        i = min(range(len(pending) - 1), key=lambda k: (pending[k + 1][0] - pending[k][1],
                                                          pending[k + 1][1] - pending[k][0]))
        (s, _, b1), (_, e, b2) = pending[i], pending[i + 1]
        pending[i:i + 2] = [(s, e, b1 + b2)]


def span_share(spans: list[Span], others: list[Span]) -> float:
    """The part of a claim taken in `spans` that it keeps beside the other clients' spans. A span
    whose GPU time, with the others' GPU time within its length, fits in that length keeps it all
    (the GPU was not oversubscribed there, however the host intervals touch). Else, by the stretch:
    a span's density is its GPU time over its length; where the densities of the spans open at once
    (its own and the others') add up to D > 1, it keeps its density over D of the stretch, elsewhere
    its density. The GPU gives equal slices to the contexts with work, and a span joined from
    several (SPANS_PENDING, the library's own bound) weighs only as much as it was busy."""
    dense = [(s, e, b / (e - s)) for s, e, b in others]
    claimed = kept = 0.0
    for start, end, busy in spans:
        claimed += busy
        mine = busy / (end - start)
        near = [(s, e, d) for s, e, d in dense if e > start and s < end]
        beside = sum(d * (min(e, end) - max(s, start)) for s, e, d in near)
        if busy + beside <= end - start:  # it fits beside them: the GPU was not oversubscribed
            kept += busy
            continue
        cuts = sorted({start, end, *(t for s, e, _ in near for t in (s, e) if start < t < end)})
        for a, b in zip(cuts, cuts[1:]):
            mid = (a + b) / 2
            total = mine + sum(d for s, e, d in near if s <= mid < e)
            kept += (b - a) * (mine if total <= 1.0 else mine / total)
    return 1.0 if claimed <= 0 else min(1.0, kept / claimed)


class GpuBusy:
    """What the clients of one GPU claim together (the module's docstring says how it is shared).
    A report claims GPU seconds over its interval, from the client's previous report to now, with
    the spans it had (or none). It is credited once the claims it overlaps are known: when every
    other client that holds the GPU has reported past its end, or GOES_ON_S after it (a holder
    whose busy time grows reports once a second)."""

    __slots__ = ("history", "spans", "latest", "pending", "credited", "since")
    KEEP_S = 5.0     # a claim is weighed against others this long after its interval ended
    GOES_ON_S = 1.5  # a claim waits at most this long for the others' reports
    OTHERS = 128     # at most this many of the latest claims are weighed (a bound on the work)
    SPANS = 2048     # at most this many of the latest spans are kept to weigh (likewise)

    def __init__(self):
        self.history: deque[tuple[int, float, float, float]] = deque()  # (client, rate, from, to)
        self.spans: deque[tuple[int, float, float, float]] = deque(maxlen=self.SPANS)
        self.latest: OrderedDict[int, tuple[float, LockStats]] = OrderedDict()  # client -> to, lock
        self.pending: deque[tuple[int, LockStats, float, float, float, list[Span] | None]] = deque()
        self.credited = 0.0
        self.since: float | None = None

    def joined(self, client: int, lock: LockStats, now: float) -> None:
        """A client attached: once it holds the GPU, claims wait for its first report too."""
        self.latest.setdefault(client, (now, lock))

    def left(self, client: int) -> None:
        """A client is gone: no claim waits for it (its pending claims are still settled)."""
        self.latest.pop(client, None)

    def claim(self, client: int, lock: LockStats, seconds: float, start: float, now: float,
              spans: list[Span] | None = None) -> None:
        """`seconds` of GPU time claimed over [start, now], taken in `spans` (None: not known);
        credited to `lock` now or later."""
        if self.since is None:
            self.since = start  # the first claim: from the ATTACH it counts from
        rate = min(1.0, max(0.0, seconds / max(now - start, 1e-3)))
        self.history.append((client, rate, start, now))
        if spans:
            self.spans.extend((client, s, e, b) for s, e, b in spans)
        self.latest.pop(client, None)
        self.latest[client] = (now, lock)
        self.pending.append((client, lock, seconds, start, now, spans or None))
        self.settle(now)

    def settle(self, now: float) -> None:
        """Credit the pending claims whose overlapping claims are known (oldest first)."""
        while self.pending and self._known(self.pending[0], now):
            client, lock, seconds, start, end, spans = self.pending.popleft()
            share = (self._span_share(client, spans) if spans else
                     self._rate_share(client, seconds, start, end))
            lock.busy += self._credit(seconds * share, end)
            seen(lock, end)
        while self.history and self.history[0][3] < now - self.KEEP_S:
            self.history.popleft()
        while self.spans and self.spans[0][2] < now - self.KEEP_S:
            self.spans.popleft()
        while self.latest:
            client, (end, lock) = next(iter(self.latest.items()))
            if end >= now - self.KEEP_S or lock.granted is not None:
                break
            del self.latest[client]

    def _known(self, pending, now: float) -> bool:
        """Every other holder has reported past the claim's end, and none had a span open then
        whose time is still to come (BUSY_SPANS' open_ns); or GOES_ON_S passed."""
        client, end = pending[0], pending[4]
        if now >= end + self.GOES_ON_S:
            return True
        for count, (other, (reported, lock)) in enumerate(reversed(self.latest.items())):
            if count >= self.OTHERS:
                break
            if other != client and lock.granted is not None and (
                    reported < end or (lock.open_since is not None and lock.open_since < end)):
                return False
        return True

    def _rate_share(self, client: int, seconds: float, start: float, end: float) -> float:
        """The others' rates weigh on the claim as far as their intervals overlap it; when the sum
        R of its rate and theirs is above 1, it gets 1/R."""
        length = max(end - start, 1e-3)
        total = min(1.0, seconds / length)
        for count, (other, rate, s, e) in enumerate(reversed(self.history)):
            if count >= self.OTHERS or e < start - self.KEEP_S:
                break
            overlap = min(e, end) - max(s, start)
            if other != client and overlap > 0:
                total += rate * overlap / length
        return 1.0 if total <= 1.0 else 1.0 / total

    def _span_share(self, client: int, spans: list[Span]) -> float:
        lo, hi = spans[0][0], spans[-1][1]
        return span_share(spans, [(s, e, b) for c, s, e, b in self.spans
                                  if c != client and e > lo and s < hi])

    def _credit(self, seconds: float, end: float) -> float:
        """seconds, or less: never past the wall time since the first claim (BUSY_SLACK_S)."""
        room = max(0.0, (end - self.since) + BUSY_SLACK_S - self.credited)
        seconds = min(seconds, room)
        self.credited += seconds
        return seconds
