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
            # a burst under way at the report: its span is open, and what it has run so far is
            # in the total (the library retires its checkpoints as they finish)
            opened = spans[k][0] if k < len(spans) and spans[k][0] <= due else None
            running = due - opened if opened is not None else 0.0
            reports.append((due, i, batch, total + running, opened))
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


def _pair(granted=True):
    together, gpu = metrics.GpuBusy(), object()
    conns = [SimpleNamespace(locks={}, id=i + 1) for i in range(2)]
    for c in conns:
        metrics.attached(c, gpu, 0.0, together)
        if granted:
            metrics.lock_stats(c, gpu).granted = 0.0
    return together, gpu, conns


S = 1_000_000_000


def _both_saturate(first_spans_busy: int | None) -> tuple[float, float]:
    """Two clients busy all along for 10 s, reporting each second, the first a little before the
    second. The second sends honest spans; the first sends spans of first_spans_busy ns each second
    (None: no spans, an older library). What each is credited."""
    together, gpu, (first, second) = _pair()
    for t in range(1, 11):
        if first_spans_busy is not None:
            metrics.busy_spans(first, gpu, [((t - 1) * S, t * S, first_spans_busy)], float(t))
        metrics.busy(first, gpu, t * S, float(t), together)
        metrics.busy_spans(second, gpu, [((t - 1) * S, t * S, S)], t + 0.01)
        metrics.busy(second, gpu, t * S, t + 0.01, together)
    return metrics.busy_seconds(first.locks[gpu], 20.0), metrics.busy_seconds(second.locks[gpu], 20.0)


def test_one_busy_spans_per_update_and_none_overlapping_the_last_accepted():
    _, gpu, (conn, _) = _pair()
    assert metrics.busy_spans(conn, gpu, [(0, S // 2, S // 4)], 1.0)
    assert metrics.busy_spans(conn, gpu, [(S // 2, S, S // 4)], 1.0)  # a second replaces it
    assert conn.locks[gpu].spans == [(0.5, 1.0, 0.25)]
    # spans must start after the last accepted one ended, across messages
    assert not metrics.busy_spans(conn, gpu, [(int(0.9 * S), S, 1)], 1.1)
    assert not metrics.busy_spans(conn, gpu, [], 1.1, open_ns=int(0.9 * S))


def test_spans_weigh_on_others_with_no_more_time_than_their_claim():
    # a client claims 1 ms but sends spans busy all along: the honest client beside it keeps
    # (nearly) all of its 0.9 s
    together, gpu, (honest, liar) = _pair()
    metrics.busy_spans(liar, gpu, [(0, S, S)], 1.0)
    metrics.busy(liar, gpu, 1_000_000, 1.0, together)
    metrics.busy_spans(honest, gpu, [(0, S, int(0.9 * S))], 1.0)
    metrics.busy(honest, gpu, int(0.9 * S), 1.01, together)
    assert metrics.busy_seconds(honest.locks[gpu], 5.0) == pytest.approx(0.9, rel=0.01)


def test_a_client_without_spans_weighs_as_a_span_of_its_rate():
    # an older library beside one that sends spans, both saturating: half each, not all to one
    a, b = _both_saturate(first_spans_busy=None)  # the first sends no spans
    assert a == pytest.approx(5.0, rel=0.05) and b == pytest.approx(5.0, rel=0.05), (a, b)


def test_a_claim_waits_for_a_span_another_holder_still_has_open():
    together, gpu, (a, b) = _pair()
    # a reports at 1.0; b's burst began at 0.5 and is still running when it reports after a, at
    # 1.02 (0.52 s of it so far): open_ns says so; it closes at 1.5, and its next report brings
    # the span
    metrics.busy_spans(a, gpu, [(0, S, S)], 1.0)
    metrics.busy(a, gpu, S, 1.0, together)
    metrics.busy_spans(b, gpu, [], 1.02, open_ns=S // 2)
    metrics.busy(b, gpu, int(0.52 * S), 1.02, together)
    assert a.locks[gpu].busy == 0.0 and together.pending  # b reported past it, its span is open
    metrics.busy_spans(b, gpu, [(S // 2, int(1.5 * S), S)], 1.6)
    metrics.busy(b, gpu, S, 1.6, together)
    # [0, 0.5] alone, [0.5, 1] shared with b's span: 0.75 s
    assert metrics.busy_seconds(a.locks[gpu], 1.6) == pytest.approx(0.75, rel=0.01)


def test_spans_of_an_update_that_does_not_grow_are_not_left_for_the_next():
    together, gpu, (a, _) = _pair(granted=False)
    metrics.busy_spans(a, gpu, [(0, S // 2, S // 2)], 0.6)
    metrics.busy(a, gpu, S // 2, 0.6, together)
    metrics.busy_spans(a, gpu, [(int(0.6 * S), int(0.7 * S), 0)], 0.8)
    metrics.busy(a, gpu, S // 2, 0.8, together)               # no growth: spans dropped with it
    assert a.locks[gpu].spans is None


def test_a_claim_is_weighed_against_a_bounded_number_of_spans(monkeypatch):
    """However many spans others send, one claim is weighed against the latest OTHER_SPANS of
    them (the event loop's work per claim is bounded)."""
    together, gpu, (a, b) = _pair()
    seen = []
    real = gpu_busy.span_share
    monkeypatch.setattr(gpu_busy, "span_share", lambda mine, others: seen.append(len(others))
                        or real(mine, others))
    t = 0.0
    for k in range(60):  # b: 60 reports of 16 spans each, all within the second a claims
        spans = [(int((t + i * 1e-5) * S), int((t + (i + 0.5) * 1e-5) * S), 1000)
                 for i in range(16)]
        t += 16e-5
        assert metrics.busy_spans(b, gpu, spans, 0.5 + k * 1e-3)
        metrics.busy(b, gpu, 16_000 * (k + 1), 0.5 + k * 1e-3, together)
    metrics.busy_spans(a, gpu, [(0, S, S)], 1.0)
    metrics.busy(a, gpu, S, 1.0, together)
    metrics.busy_seconds(a.locks[gpu], 5.0)
    assert seen and max(seen) == together.OTHER_SPANS


@pytest.mark.parametrize("liar_busy", [S // 100, 0])
def test_spans_that_place_less_than_the_claim_do_not_keep_it_from_being_shared(liar_busy):
    # both saturate for 10 s; the liar claims all of it but its spans place little or nothing:
    # what they do not place weighs as a span of its rate, so each still gets half
    a, b = _both_saturate(first_spans_busy=liar_busy)
    assert a == pytest.approx(5.0, rel=0.05) and b == pytest.approx(5.0, rel=0.05), (a, b)


def test_a_report_of_a_client_that_sends_spans_but_placed_none_weighs_by_its_rate():
    together, gpu, (a, b) = _pair()
    metrics.busy_spans(a, gpu, [(0, S // 10, S // 10)], 0.1)   # a sends spans...
    metrics.busy(a, gpu, S // 10, 0.1, together)
    for t in range(1, 11):  # ...then reports growth with none (another context's work, say)
        metrics.busy_spans(b, gpu, [(int((t - 0.9) * S), int((t + 0.1) * S), S)], t + 0.1)
        metrics.busy(b, gpu, t * S, t + 0.1, together)
        metrics.busy(a, gpu, S // 10 + t * S, t + 0.11, together)
    x, y = (metrics.busy_seconds(c.locks[gpu], 30.0) for c in (a, b))
    assert x == pytest.approx(5.0, rel=0.1) and y == pytest.approx(5.0, rel=0.1), (x, y)


def test_a_flood_of_reports_is_shared_out_as_few_claims_with_all_their_time():
    together, gpu, (a, b) = _pair()
    for k in range(1, 2001):  # 2000 reports in a second, each 0.4 ms of GPU time in a span
        t = k * 0.0005
        metrics.busy_spans(a, gpu, [(int((t - 0.0005) * S), int(t * S), 400_000)], t)
        metrics.busy(a, gpu, k * 400_000, t, together)
    assert len(together.pending) <= 1.0 / together.MERGE_S + 1
    together.left(b.id)
    assert metrics.busy_seconds(a.locks[gpu], 5.0) == pytest.approx(0.8, rel=1e-6)
