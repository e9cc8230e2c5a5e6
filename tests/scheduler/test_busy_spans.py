"""BUSY_SPANS: how the scheduler shares out the GPU time of clients that ran at the same time
(scheduler/node/gpu_busy.py, docs/metrics.md "GPU busy time per client").

The reference is one the code cannot see: a small GPU model that shares itself equally among the
contexts with work (as the GPU's time-slicing does), runs each client's bursts and knows the work
each really did. Each client measures what the library measures: per burst, its host span (first
launch to the synchronisation's return) and the GPU time the span took, which holds the others'
slices where they overlapped. Reports go to the scheduler's arithmetic once a second, as the
library sends them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from xpushare.scheduler.node import gpu_busy, metrics

def _model(clients, seconds):
    """clients: (work per burst s, sleep after s, first start s) each. Returns, per client, its
    bursts' (start, end, measured GPU s, true GPU s), those still running at the end cut there.
    Exact processor sharing, event by event: the contexts with work each get 1/k of the GPU."""
    state = [{"left": 0.0, "start": None, "next": start} for _, _, start in clients]
    spans = [[] for _ in clients]
    t = 0.0
    while t < seconds:
        for c, (work, _, _) in zip(state, clients):
            if c["start"] is None and t >= c["next"]:
                c["start"], c["left"] = t, work
        active = [c for c in state if c["start"] is not None]
        starts = [c["next"] for c in state if c["start"] is None]
        ends = [min(c["left"] for c in active) * len(active)] if active else []
        step = min(ends + [n - t for n in starts] + [seconds - t])
        for c in active:
            c["left"] -= step / len(active)
        t += step
        for i, (c, (work, sleep, _)) in enumerate(zip(state, clients)):
            if c["start"] is not None and c["left"] <= 1e-12:
                spans[i].append((c["start"], t, t - c["start"], work))
                c["start"], c["next"] = None, t + sleep
    for i, (c, (work, _, _)) in enumerate(zip(state, clients)):  # cut at the end, as a report does
        if c["start"] is not None and t > c["start"]:
            spans[i].append((c["start"], t, t - c["start"], work - c["left"]))
    return spans


def _credit(spans_per_client, with_spans=True, period=1.0, full=16, soonest=0.05):
    """Feeds each client's bursts to the scheduler's arithmetic as the library reports them: once a
    period, or as soon as `full` spans wait (at most one report per `soonest`); returns what each
    is credited."""
    together, gpu = metrics.GpuBusy(), object()
    conns = [SimpleNamespace(locks={}, id=i + 1) for i in range(len(spans_per_client))]
    for c in conns:
        metrics.attached(c, gpu, 0.0, together)
        metrics.lock_stats(c, gpu).granted = 0.0
    end = max(s[1] for spans in spans_per_client for s in spans)
    reports = []
    for i, spans in enumerate(spans_per_client):
        total, last, k = 0.0, 0.01 * i, 0
        while k < len(spans):
            due = last + period   # the period's report, or the one after the full'th span
            if k + full - 1 < len(spans) and spans[k + full - 1][1] < due:
                due = max(spans[k + full - 1][1], last + soonest)
            batch = []
            while k < len(spans) and spans[k][1] <= due:
                batch.append(spans[k])
                k += 1
            total += sum(s[2] for s in batch)
            # a burst under way at the report: its span is open (its time comes later)
            opened = spans[k][0] if k < len(spans) and spans[k][0] <= due else None
            reports.append((due, i, batch, total, opened))
            last = due
    for t, i, batch, total, opened in sorted(reports, key=lambda r: r[0]):
        if with_spans and (batch or opened is not None):
            ns = [(int(s * 1e9), int(e * 1e9), int(b * 1e9)) for s, e, b, _ in batch]
            assert metrics.busy_spans(conns[i], gpu, ns, t, int((opened or 0) * 1e9))
        metrics.busy(conns[i], gpu, int(total * 1e9), t, together)
    return [metrics.busy_seconds(c.locks[gpu], end + 10) for c in conns]


def _true(spans_per_client):
    return [sum(s[3] for s in spans) for spans in spans_per_client]


def test_bursts_that_overlap_are_shared_by_the_stretch():
    # two clients of bursts of 5.6 ms with 10 ms asleep, out of step: each burst's span is
    # stretched by the other's slices; the claims as measured add up to about the wall time, so
    # sharing by rates changes nothing, sharing by spans gives each its own work
    spans = _model([(0.0056, 0.010, 0.0), (0.0056, 0.010, 0.004)], 3.0)
    true = _true(spans)
    measured = [sum(s[2] for s in c) for c in spans]
    assert min(m / t for m, t in zip(measured, true)) > 1.2  # what the spans hold
    by_rates = _credit(spans, with_spans=False)
    assert max(abs(r / t - 1) for r, t in zip(by_rates, true)) > 0.2
    by_spans = _credit(spans)
    for got, want in zip(by_spans, true):
        assert got == pytest.approx(want, rel=0.03), (by_spans, true)


def test_saturating_clients_together_get_half_each():
    spans = _model([(0.037, 0.0, 0.0), (0.037, 0.0, 0.0005)], 2.0)
    for got, want in zip(_credit(spans), _true(spans)):
        assert got == pytest.approx(want, rel=0.03)


def test_spans_that_touch_on_the_host_but_fit_keep_their_whole_time():
    # each span holds GPU time well under its length (launch gaps, a late synchronisation): where
    # two overlap their time fits in it, so the GPU was not shared there and nothing is cut
    a = [(0.0 + k * 0.02, 0.010 + k * 0.02, 0.004, 0.004) for k in range(50)]
    b = [(0.005 + k * 0.02, 0.015 + k * 0.02, 0.004, 0.004) for k in range(50)]
    for got, want in zip(_credit([a, b]), _true([a, b])):
        assert got == pytest.approx(want, rel=1e-6)


def test_bursts_that_barely_overlap_keep_their_time():
    # each burst's span is 83% busy (its launches before, the synchronisation's return after);
    # the other's next burst starts 1 ms before it ends: their densities add up to more than 1 in
    # that millisecond, but the other's GPU time within it still fits beside its own
    a = [(0.02 * k, 0.02 * k + 0.010, 0.0083, 0.0083) for k in range(50)]
    b = [(0.02 * k + 0.009, 0.02 * k + 0.019, 0.0083, 0.0083) for k in range(50)]
    for got, want in zip(_credit([a, b]), _true([a, b])):
        assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_random_bursty_clients_are_credited_their_own_work(seed):
    """Seeded: 2-4 clients of random burst lengths, sleeps and starts, run by the model."""
    rnd = random.Random(seed)
    clients = [(rnd.uniform(0.001, 0.02), rnd.choice([0.0, rnd.uniform(0.002, 0.03)]),
                rnd.uniform(0.0, 0.02)) for _ in range(rnd.randint(2, 4))]
    spans = _model(clients, 1.5)
    credited, true = _credit(spans), _true(spans)
    wall = max(s[1] for c in spans for s in c)
    assert sum(credited) <= wall + metrics.BUSY_SLACK_S
    for got, want in zip(credited, true):
        assert got == pytest.approx(want, rel=0.02), (seed, clients, credited, true)


def test_spans_that_break_the_rules_are_dropped():
    conn, gpu = SimpleNamespace(locks={}, id=1), object()
    metrics.attached(conn, gpu, 10.0)
    s = 1_000_000_000
    ok = [(int(10.5 * s), 11 * s, s // 4), (11 * s, 12 * s, s // 2)]
    assert metrics.busy_spans(conn, gpu, ok, 12.0)
    for bad in ([(12 * s, 11 * s, 1)],                          # ends before it starts
                [(int(11.5 * s), 12 * s, 1), (11 * s, int(11.2 * s), 1)],  # out of order
                [(8 * s, 9 * s, 1)],                            # before the client's last report
                [(11 * s, 14 * s, 1)]):                         # in the future
        assert not metrics.busy_spans(conn, gpu, bad, 12.0), bad
    assert conn.locks[gpu].spans == [(10.5, 11.0, 0.25), (11.0, 12.0, 0.5)]
    # more GPU time than its length (time retired late): counted as busy all along, no more
    assert metrics.busy_spans(conn, gpu, [(12 * s, int(12.1 * s), s)], 12.2)
    assert conn.locks[gpu].spans[-1] == pytest.approx((12.0, 12.1, 0.1))


def test_spans_past_the_bound_are_joined_without_losing_time():
    pending = []
    spans = [(float(k), k + 0.5, 0.25) for k in range(gpu_busy.SPANS_PENDING + 10)]
    gpu_busy.keep_spans(pending, spans)
    assert len(pending) == gpu_busy.SPANS_PENDING
    assert sum(b for _, _, b in pending) == pytest.approx(sum(b for _, _, b in spans))
    assert all(a[1] <= b[0] for a, b in zip(pending, pending[1:]))
    # the gaps are alike: pairs are joined, not one span grown over many
    assert max(e - s for s, e, _ in pending) == 1.5
    # the closest pair goes first
    pending = [(float(k), k + 0.5, 0.25) for k in range(gpu_busy.SPANS_PENDING)]
    gpu_busy.keep_spans(pending, [(gpu_busy.SPANS_PENDING - 0.49, gpu_busy.SPANS_PENDING, 0.1)])
    assert pending[-1] == (gpu_busy.SPANS_PENDING - 1.0, gpu_busy.SPANS_PENDING, 0.35)
