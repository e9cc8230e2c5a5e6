"""What the scheduler counts as events happen, for its Prometheus exporter (docs/metrics.md).

The exporter reads most of what it shows from live state at scrape time (metrics_collect.py); what
only an event can tell is counted here, by hooks the shell calls where the event happens:
registry._carry_out (grants, drops, EVICTs sent), handlers (requests, releases and their switch
reports; RESIDENCY's moves, through swap.py), connection.py (messages, malformed frames). The lock round trip runs through these hooks, so each is
a few attribute updates: no label formatting, no allocation but the first record of a client on a
GPU, no prometheus_client (which the daemon does not need unless --metrics-port is given).

Where the counts live decides when their series go: a client's own counts are a LockStats in its
connection (Conn.locks, one per GPU), gone with the connection; a GPU's are a GpuStats on the Gpu,
gone when a client-made GPU is forgotten; the scheduler's are one SchedulerStats in SchedulerState.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, deque

from ..policy import SWITCH_REASONS
from .gpu_busy import (  # noqa: F401  (BUSY_*: part of what metrics offers status and the exporter)
    BUSY_SLACK, BUSY_SLACK_S, BUSY_WINDOW, GpuBusy, Span, seen, spans_floor, valid_spans,
)

# Seconds. A lock wait runs from microseconds (a free GPU) to a few quanta (up to minutes); a switch
# phase from microseconds to SWITCH_REPORT_MAX (60 s), the most a report counts for.
WAIT_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 120.0, 300.0)
SWITCH_BUCKETS = (0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                  30.0, 60.0)
# A client's own queueing delays (request -> grant), for its histogram: fewer bounds than the GPU's
# (a series each, per client), fine where a latency-sensitive client's waits lie (under 10 ms).
QUEUE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0)
RECENT_WAITS = 256  # the waits status summarises (p50, p99): the client's latest
# drain, evict, prefetch: what LOCK_RELEASED reports; swap_out, swap_in: the moves RESIDENCY reports
# (an EVICT's, a drop's eviction; the swap-in at a grant), swap.py.
PHASES = ("drain", "evict", "prefetch", "swap_out", "swap_in")


class Histogram:
    """Counts per bucket (not cumulative; the collector sums them) and the sum of observations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)   # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def copy(self) -> tuple[tuple[float, ...], tuple[int, ...], float]:
        return self.bounds, tuple(self.counts), self.total


class LastSwitch:
    """The phases of the GPU's last switch, for status and top. A switch begins when room is made
    for a waiter (a DROP_LOCK of a switch reason, or an EVICT) after the previous one saw a grant,
    and gathers what clients report until the next begins: the drain and swap-out of those that made
    room, the swap-in of the client granted. Each phase is the longest reported in the switch (the
    clients move in parallel; the waiter waits for the longest); None: not reported."""

    __slots__ = ("started", "granted", "drain", "swap_out", "swap_in")

    def __init__(self):
        self.started: float | None = None
        self.granted = False
        self.drain = self.swap_out = self.swap_in = None

    def begin(self, now: float) -> None:
        if self.started is None or self.granted:
            self.started, self.granted = now, False
            self.drain = self.swap_out = self.swap_in = None

    def grant(self) -> None:
        if self.started is not None:
            self.granted = True

    def phase(self, name: str, seconds: float) -> None:
        """name: drain, swap_out or swap_in."""
        if self.started is not None:
            before = getattr(self, name)
            setattr(self, name, seconds if before is None else max(before, seconds))


class GpuStats:
    """One GPU's counts: switches (drops that hand the GPU to another client: SWITCH_REASONS), the
    request -> grant waits, the switch phases clients report, the EVICTs sent (reclaims) and the
    last switch's phases."""

    __slots__ = ("switches", "wait", "phases", "reclaims", "last_switch", "busy")

    def __init__(self):
        self.busy = GpuBusy()             # what its clients' busy reports claim together
        self.switches = 0
        self.wait = Histogram(WAIT_BUCKETS)
        self.phases = {p: Histogram(SWITCH_BUCKETS) for p in PHASES}
        self.reclaims = 0                 # EVICTs sent to idle clients for room (swap.py)
        self.last_switch = LastSwitch()


class LockStats:
    """One client's lock on one GPU: its counts, and where its current request or hold began.
    The in-progress wait or hold is added at scrape time, so the totals move while it lasts and
    stay monotonic (what a release adds is what a scrape showed, and more)."""

    __slots__ = ("grants", "drops", "held", "waited", "requested", "granted", "dropped", "evict",
                 "prefetch", "busy", "busy_ns", "busy_at", "busy_clamps", "busy_seen", "together",
                 "spans", "spans_end", "spans_covered", "open_at", "open_since", "span_budget",
                 "busy_from", "accepted", "queueing", "recent_waits")

    def __init__(self):
        self.grants = 0
        self.drops: Counter[int] = Counter()      # DropReason -> DROP_LOCKs sent
        self.held = 0.0                           # seconds of completed holds
        self.waited = 0.0                         # seconds of completed waits
        self.requested: float | None = None       # when the pending request came
        self.granted: float | None = None         # when the lock now held was granted
        self.dropped = self.evict = self.prefetch = False  # of the hold now: what its report covers
        self.busy = 0.0                           # GPU busy seconds credited (BUSY_UPDATE)
        self.busy_ns = 0                          # the client's last cumulative report, ns
        self.busy_at: float | None = None         # when it came (or the GPU was attached)
        self.busy_from: float | None = None       # the first of those: its reports' whole time
        self.accepted = 0.0                       # what its reports were allowed, in all
        self.busy_clamps = 0                      # reports cut to the wall time that passed
        self.busy_seen: deque[tuple[float, float]] = deque()  # (when, busy) over BUSY_WINDOW
        self.together: GpuBusy | None = None      # its GPU's, which credits busy (GpuBusy)
        self.spans: list[Span] | None = None      # BUSY_SPANS' for the next BUSY_UPDATE
        self.spans_end: float | None = None       # the end of the last span accepted
        self.span_budget = 0.0                    # GPU s claimed that its spans may still weigh
        self.spans_covered: float | None = None   # where the last claim's pieces ended (gpu_busy)
        self.open_at: float | None = None         # and its open span's start
        self.open_since: float | None = None      # that of the last BUSY_UPDATE: a span still
                                                  # open then, whose time a later report brings
        self.queueing = Histogram(QUEUE_BUCKETS)  # its request -> grant waits
        self.recent_waits: deque[float] = deque(maxlen=RECENT_WAITS)


def busy_ratio(stats: LockStats, now: float) -> float | None:
    """The client's GPU busy time over the wall time of the last BUSY_WINDOW seconds (from its
    reports: the oldest kept is at most a report older than the window); None before two."""
    busy_seconds(stats, now)
    kept = stats.busy_seen
    if len(kept) < 2:
        return None
    (t0, b0), (t1, b1) = kept[0], kept[-1]
    span = max(now, t1) - t0
    return None if span <= 0 else min(1.0, max(0.0, (b1 - b0) / span))


def attached(conn, gpu, now: float, together: GpuBusy | None = None) -> None:
    """ATTACH: the wall time a client's busy reports are measured against begins; together: its
    GPU's GpuBusy."""
    stats = lock_stats(conn, gpu)
    if together is not None:
        stats.together = together
        together.joined(conn.id, stats, now)
    if stats.busy_at is None:
        stats.busy_at = now
    if not stats.busy_seen:
        stats.busy_seen.append((now, stats.busy))


def busy_seconds(stats: LockStats, now: float) -> float:
    """The client's credited GPU busy time, with what could be settled by now."""
    if stats.together is not None:
        stats.together.settle(now)
    return stats.busy


def busy_spans(conn, gpu, spans: list[tuple[int, int, int]], now: float,
               open_ns: int = 0) -> bool:
    """BUSY_SPANS: where the next BUSY_UPDATE's time was taken, and the start of a span still open
    (0: none), kept for it. False (and nothing kept) when they break a rule (gpu_busy.valid_spans):
    that report is then shared out by rates, as one without spans."""
    stats = lock_stats(conn, gpu)
    floor = spans_floor(stats.busy_at if stats.busy_at is not None else now, stats.spans_end)
    checked = valid_spans(spans, floor, now)
    open_at = open_ns / 1e9 if open_ns else None
    if checked is None or (open_at is not None and
                           not (checked[-1][1] if checked else floor) <= open_at <= now):
        return False
    # one BUSY_SPANS for each BUSY_UPDATE: a second one before it replaces the first
    stats.spans = checked
    stats.open_at = open_at
    if checked:
        stats.spans_end = checked[-1][1]
    return True


def busy(conn, gpu, busy_ns: int, now: float, together: GpuBusy | None = None) -> float | None:
    """BUSY_UPDATE (cumulative ns). Credits the increase over the last report, at most the wall
    time since it (BUSY_SLACK), and all reports together at most the wall time since the first; a
    value below the last is ignored, so the counter never goes back.
    together: the GPU's GpuBusy, which shares out what its clients claim at once (and credits
    it once it can tell: busy_seconds). Returns None, or
    the seconds claimed when the report was cut to the client's own wall time (the caller logs it).
    A first report is cut silently: the total is the process's since it started, and a client that
    reconnects (a scheduler restart) brings what it measured before this connection."""
    stats = lock_stats(conn, gpu)
    if stats.busy_at is None:
        stats.busy_at = now
    # the BUSY_SPANS before it go with this report, whatever it says
    spans, stats.spans = stats.spans, None
    stats.open_since, stats.open_at = stats.open_at, None
    if busy_ns <= stats.busy_ns:
        return None
    first = stats.busy_ns == 0
    claimed = (busy_ns - stats.busy_ns) / 1e9
    start = stats.busy_at
    if stats.busy_from is None:
        stats.busy_from = start
    # The wall time since the last report, with slack; and, over all its reports, the wall time
    # since the first with the slack once: many small reports do not add up their slack.
    allowed = max(0.0, min(max(0.0, now - start) * BUSY_SLACK + BUSY_SLACK_S,
                           (now - stats.busy_from) * BUSY_SLACK + BUSY_SLACK_S - stats.accepted))
    stats.accepted += min(claimed, allowed)
    stats.busy_ns = busy_ns
    stats.busy_at = now
    cut = claimed > allowed
    if together is not None:
        stats.together = together
        together.claim(conn.id, stats, min(claimed, allowed), start, now, spans)
    else:
        stats.busy += min(claimed, allowed)
        seen(stats, now)
    if cut and not first:
        stats.busy_clamps += 1
        return claimed
    return None


class SchedulerStats:
    """Scheduler-wide counts."""

    __slots__ = ("messages", "malformed", "connections")

    def __init__(self):
        self.messages: Counter[int] = Counter()   # MessageType -> messages handled
        self.malformed = 0                        # frames that were not a valid message in order
        self.connections = 0                      # connections admitted since the start


def lock_stats(conn, gpu) -> LockStats:
    stats = conn.locks.get(gpu)
    if stats is None:
        stats = conn.locks[gpu] = LockStats()
    return stats


def requested(conn, gpu, now: float) -> None:
    """REQ_LOCK: a wait begins, unless the client already waits or holds (the arbiter ignores it)."""
    stats = lock_stats(conn, gpu)
    if stats.requested is None and stats.granted is None:
        stats.requested = now


def granted(conn, gpu, prefetch: bool, now: float) -> None:
    stats = lock_stats(conn, gpu)
    stats.grants += 1
    if stats.requested is not None:  # a grant always follows a request; be safe anyway
        wait = max(0.0, now - stats.requested)
        stats.waited += wait
        gpu.stats.wait.observe(wait)
        stats.queueing.observe(wait)
        stats.recent_waits.append(wait)
        stats.requested = None
    stats.granted = now
    stats.dropped = stats.evict = False
    stats.prefetch = prefetch
    gpu.stats.last_switch.grant()


def dropped(conn, gpu, reason, evict: bool, now: float) -> None:
    stats = lock_stats(conn, gpu)
    stats.drops[reason] += 1
    stats.dropped, stats.evict = True, evict
    if reason in SWITCH_REASONS:
        gpu.stats.switches += 1
        gpu.stats.last_switch.begin(now)


def released(conn, gpu, report, now: float) -> None:
    """LOCK_RELEASED of a lock held: the hold ends; the report's phases that this hold had (drain
    and evict after a DROP_LOCK, with EVICT for the latter; prefetch after a grant with PREFETCH)
    go into the GPU's switch histograms, already clamped (SwitchReport.from_us)."""
    stats = lock_stats(conn, gpu)
    if stats.granted is not None:
        stats.held += max(0.0, now - stats.granted)
        stats.granted = None
    phases, last = gpu.stats.phases, gpu.stats.last_switch
    if stats.dropped:
        phases["drain"].observe(report.drain)
        last.phase("drain", report.drain)
        if stats.evict:
            phases["evict"].observe(report.evict)
            if report.evict:  # 0: moved after the release (NVSHARE_EVICT=background): RESIDENCY's
                last.phase("swap_out", report.evict)
    if stats.prefetch:
        phases["prefetch"].observe(report.prefetch)
    stats.dropped = stats.evict = stats.prefetch = False


def queueing_delay(stats: LockStats | None, now: float) -> dict:
    """The client's queueing delay on a GPU (request -> grant), seconds: over its last RECENT_WAITS
    waits the lower-median and 99th-percentile (nearest rank), the last and the largest; `waiting`:
    the wait in progress, if any; `count`: waits since it attached."""
    waits = sorted(stats.recent_waits) if stats is not None else []
    pending = None if stats is None or stats.requested is None else max(0.0, now - stats.requested)

    def rank(q: float):  # nearest rank: the smallest wait with at least q of them at or below it
        return round(waits[max(0, math.ceil(len(waits) * q) - 1)], 6) if waits else None
    return {"count": sum(stats.queueing.counts) if stats is not None else 0,
            "last": round(stats.recent_waits[-1], 6) if waits else None,
            "p50": rank(0.5), "p99": rank(0.99), "max": round(waits[-1], 6) if waits else None,
            "waiting": None if pending is None else round(pending, 6)}
