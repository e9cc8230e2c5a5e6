"""What the clients of one GPU claim of its time together, and how it is shared out when they ran
at the same time (docs/metrics.md, "GPU busy time per client").

A client's library measures the spans in which its work kept the GPU busy, on the GPU's clock.
When contexts run together the GPU time-slices between them, so each one's spans also hold the
others' slices and their claims add up to more than the GPU had. Two ways to tell whose time it
was, by what the client sent:
- with BUSY_SPANS (its spans on the host's clock, and the piece of one still open): span_share.
  A span whose GPU time fits beside the others' keeps it; else, where the spans open at once
  (its own and the other clients') are busier together than the GPU can be (their densities, GPU
  time over length, add up to more than 1), each gets its part of the stretch in proportion to its
  density. The GPU gives the contexts that have work equal slices, so spans measured while they
  overlap, each holding the others' slices, get equal parts; bench/observability/busy_accuracy.py
  measures the result against the kernels' native time;
- with BUSY_UPDATE alone (an older library): by rates over the reports' intervals, which keeps
  the sum within the GPU's time but cannot tell overlapping bursts from alternating ones; for the
  others, such a claim weighs as one span of its rate.
Whatever either says, the GPU's clients are never credited more than the wall time since the first
of them attached.
"""

from __future__ import annotations

from bisect import bisect_right
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

Span = tuple[float, float, float]  # start, end (host monotonic seconds), GPU seconds in it


def seen(stats: LockStats, now: float) -> None:
    """The client's credited total at `now`, for its busy ratio over BUSY_WINDOW."""
    kept = stats.busy_seen
    kept.append((now, stats.busy))
    while len(kept) > 2 and kept[1][0] <= now - BUSY_WINDOW:
        kept.popleft()


def spans_floor(since: float, spans_end: float | None) -> float:
    """Where a client's next span may start at the earliest: SPAN_EARLY_S before its previous
    report (`since`), and not before the end of its last accepted span."""
    floor = since - SPAN_EARLY_S
    return floor if spans_end is None else max(floor, spans_end)


def valid_spans(spans: list[tuple[int, int, int]], floor: float, now: float) -> list[Span] | None:
    """BUSY_SPANS' spans (ns) as seconds, or None when they break a rule (docs/protocol.md): in
    order, each ending after it starts, after the previous one, within [floor (spans_floor), now].
    A span that claims more GPU time than its length counts as busy all along (GPU time retired
    late, after an idle point that did not wait: what it claims is the BUSY_UPDATE's)."""
    out: list[Span] = []
    last = floor
    for start_ns, end_ns, busy_ns in spans:
        start, end, busy = start_ns / 1e9, end_ns / 1e9, busy_ns / 1e9
        if not (last <= start < end <= now + BUSY_SLACK_S):
            return None
        out.append((start, end, min(busy, end - start)))
        last = end
    return out


def span_share(spans: list[Span], others: list[Span]) -> float:
    """The part of a claim taken in `spans` (in order, not overlapping) that it keeps beside the
    other clients' spans. A span whose GPU time, with the others' GPU time within its length, fits
    in that length keeps it all (the GPU was not oversubscribed there, however the host intervals
    touch). Else, by the stretch: a span's density is its GPU time over its length; where the
    densities of the spans open at once (its own and the others') add up to D > 1, it keeps its
    density over D of the stretch, elsewhere its density. The GPU gives equal slices to the
    contexts with work, and a span joined from several (the library's 16 slots) weighs only as
    much as it was busy. One sweep over the others' density steps: O((m + n) log m)."""
    steps: dict[float, float] = {}
    for s, e, b in others:
        density = b / (e - s)
        steps[s] = steps.get(s, 0.0) + density
        steps[e] = steps.get(e, 0.0) - density
    cuts = sorted(steps)
    level, levels = 0.0, []  # the others' density from cuts[i] to cuts[i + 1]
    for t in cuts:
        level += steps[t]
        levels.append(level)
    claimed = kept = 0.0
    for start, end, busy in spans:
        claimed += busy
        mine = busy / (end - start)
        i = bisect_right(cuts, start) - 1  # the step in force at `start` (-1: before any)
        pieces, t = [], start
        while t < end:
            nxt = cuts[i + 1] if i + 1 < len(cuts) else end
            upto = min(nxt, end)
            if upto > t:
                pieces.append((upto - t, levels[i] if i >= 0 else 0.0))
            t, i = upto, i + 1
        beside = sum(length * level for length, level in pieces)
        if busy + beside <= (end - start) * (1 + 1e-9):  # it fits beside them
            kept += busy
            continue
        kept += sum(length * (mine if mine + level <= 1.0 else mine / (mine + level))
                    for length, level in pieces)
    return 1.0 if claimed <= 0 else min(1.0, kept / claimed)


class GpuBusy:
    """What the clients of one GPU claim together (the module's docstring says how it is shared).
    A report claims GPU seconds over its interval, from the client's previous report to now, with
    the spans it had (or none). It is credited once the claims it overlaps are known: when every
    other client that holds the GPU has reported past its end, or GOES_ON_S after it (a holder
    whose busy time grows reports once a second)."""

    __slots__ = ("history", "spans", "latest", "pending", "merging", "credited", "since")
    KEEP_S = 5.0     # a claim is weighed against others this long after its interval ended
    GOES_ON_S = 1.5  # a claim waits at most this long for the others' reports
    OTHERS = 128     # at most this many of the latest claims are weighed (a bound on the work)
    SPANS = 2048     # at most this many of the latest spans are kept to weigh (likewise)
    OTHER_SPANS = 512  # and at most this many of them weigh on one claim
    MERGE_S = 0.02     # a client's claims closer than this are shared out as one (the library
                       # reports at most once per 50 ms but for a release)
    MERGED_SPANS = 64  # past this many spans, a joined claim weighs as one span of its rate

    def __init__(self):
        self.history: deque[tuple[int, float, float, float]] = deque()  # (client, rate, from, to)
        self.spans: deque[tuple[int, float, float, float]] = deque(maxlen=self.SPANS)
        self.latest: OrderedDict[int, tuple[float, LockStats]] = OrderedDict()  # client -> to, lock
        # [client, lock, seconds, start, end, spans, still pending]
        self.pending: deque[list] = deque()
        self.merging: dict[int, list] = {}  # client -> its latest pending claim
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
        """`seconds` of GPU time claimed over [start, now], taken in `spans` (the BUSY_SPANS that
        came with it; None from a client that sends none); credited to `lock` now or later. A
        claim that comes within MERGE_S of the same client's previous one, still pending, joins
        it: however many reports a client sends, the loop shares out one claim per MERGE_S."""
        if self.since is None:
            self.since = start  # the first claim: from the ATTACH it counts from
        rate = min(1.0, max(0.0, seconds / max(now - start, 1e-3)))
        self.history.append((client, rate, start, now))
        if spans is not None or lock.spans_end is not None or lock.open_since is not None:
            spans = self._pieces(lock, seconds, start, now, spans or [])
            self.spans.extend((client, s, e, b) for s, e, b in spans)
        elif now > start:  # a client that sends no spans (an older library): one of its rate
            self.spans.append((client, start, now, rate * (now - start)))
        self.latest.pop(client, None)
        self.latest[client] = (now, lock)
        last = self.merging.get(client)
        if last is not None and last[6] and now - last[4] < self.MERGE_S:
            last[2] += seconds
            last[4] = now
            joined = (last[5] or []) + (spans or [])
            if len(joined) > self.MERGED_SPANS:  # a flood: one span of its rate
                joined = [(last[3], now, last[2])] if now > last[3] else []
            last[5] = joined or None
        else:
            entry = [client, lock, seconds, start, now, spans or None, True]
            self.pending.append(entry)
            self.merging[client] = entry
        self.settle(now)

    def _pieces(self, lock: LockStats, seconds: float, start: float, now: float,
                spans: list[Span]) -> list[Span]:
        """Where a claim's time was taken: its closed spans, less what an earlier claim's open
        piece already covered, and the span still open (lock.open_since) up to now with the rest
        of the claim. They weigh on others with no more GPU time than the client claimed (its
        claims fill a budget they draw on: a span open across reports is claimed in parts), and
        what the claim has that they do not place weighs as a span of its rate: spans that say
        less than the claim do not keep it from being shared."""
        covered = lock.spans_covered
        pieces = []
        for s, e, b in spans:
            if covered is not None and s < covered:
                if e <= covered:
                    continue
                s, b = covered, b * (e - covered) / (e - s)
            pieces.append((s, e, b))
        if lock.open_since is not None:
            s = lock.open_since  # where the open span's piece begins: after what is placed already
            if covered is not None:
                s = max(s, covered)
            if pieces:
                s = max(s, pieces[-1][1])
            if now > s:
                rest = max(0.0, seconds - sum(b for _, _, b in pieces))
                pieces.append((s, now, min(rest, now - s)))
            lock.spans_covered = now
        elif pieces:
            lock.spans_covered = pieces[-1][1]
        lock.span_budget = min(lock.span_budget + seconds, self.KEEP_S)
        total = sum(b for _, _, b in pieces)
        use = min(total, lock.span_budget)
        lock.span_budget -= use
        if total > 0:
            pieces = [(s, e, b * use / total) for s, e, b in pieces]
        rest = seconds - use
        if rest > 1e-9 and now > start:
            pieces.append((start, now, min(rest, now - start)))
        return pieces

    def settle(self, now: float) -> None:
        """Credit the pending claims whose overlapping claims are known (oldest first)."""
        while self.pending and self._known(self.pending[0], now):
            entry = self.pending.popleft()
            client, lock, seconds, start, end, spans, _ = entry
            entry[6] = False
            if self.merging.get(client) is entry:
                del self.merging[client]
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
        """span_share against the latest OTHER_SPANS of the other clients' spans that overlap
        these (a bound on the loop's work per claim: about half a millisecond)."""
        lo, hi = spans[0][0], spans[-1][1]
        others = []
        for c, s, e, b in reversed(self.spans):
            if c != client and e > lo and s < hi and e > s:
                others.append((s, e, b))
                if len(others) == self.OTHER_SPANS:
                    break
        return span_share(spans, others)

    def _credit(self, seconds: float, end: float) -> float:
        """seconds, or less: never past the wall time since the first claim (BUSY_SLACK_S)."""
        room = max(0.0, (end - self.since) + BUSY_SLACK_S - self.credited)
        seconds = min(seconds, room)
        self.credited += seconds
        return seconds
