"""Per-client GPU busy time (BUSY_UPDATE, docs/protocol.md): the scheduler keeps a monotonic
counter per client and GPU, never credits more than the wall time that passed, and shows it in
status and in the exporter until the client leaves. The arithmetic is metrics.busy (time passed
in); the rest runs against a live scheduler with raw protocol clients."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from sched_harness import MessageType, registered, uuid
from test_metrics import metrics_scheduler, scrape, value  # noqa: F401  (fixture)
from testkit.waiting import poll

from xpushare.wire.protocol import FEATURE_BUSY
from xpushare.scheduler.node import metrics


def _conn():
    return SimpleNamespace(locks={})


def test_busy_is_monotonic_and_cut_to_the_wall_time():
    conn, gpu = _conn(), object()
    metrics.attached(conn, gpu, 100.0)
    assert metrics.busy(conn, gpu, 2_000_000_000, 110.0) is None       # 2 s in 10 s
    st = conn.locks[gpu]
    assert st.busy == 2.0
    assert metrics.busy(conn, gpu, 1_000_000_000, 111.0) is None       # lower: ignored
    assert st.busy == 2.0 and st.busy_ns == 2_000_000_000
    assert metrics.busy(conn, gpu, 2_000_000_000, 112.0) is None       # equal: nothing
    # 11 s claimed in 2 s (since the last accepted report at 110): cut to 2 s * 1.1 + slack
    assert metrics.busy(conn, gpu, 13_000_000_000, 112.0) == 11.0
    assert abs(st.busy - (2.0 + 2.0 * metrics.BUSY_SLACK + metrics.BUSY_SLACK_S)) < 1e-9
    assert st.busy_clamps == 1
    # later honest reports count from the value it sent
    assert metrics.busy(conn, gpu, 13_500_000_000, 113.0) is None
    assert abs(st.busy - (2.0 + 2.2 + metrics.BUSY_SLACK_S + 0.5)) < 1e-9


def test_a_first_report_is_cut_to_the_time_since_attach_without_a_warning():
    conn, gpu = _conn(), object()
    metrics.attached(conn, gpu, 50.0)
    assert metrics.busy(conn, gpu, 10**12, 51.0) is None               # a reconnect's total
    st = conn.locks[gpu]
    assert st.busy == 1.0 * metrics.BUSY_SLACK + metrics.BUSY_SLACK_S and st.busy_clamps == 0


def _reports(together, conns, gpu, claims):
    """claims: (when, conn index, cumulative busy s) in time order."""
    for when, i, total in claims:
        metrics.busy(conns[i], gpu, int(total * 1e9), when, together)


@pytest.mark.parametrize("stagger", [0.05, 0.5, 0.95])
def test_clients_running_together_share_the_gpu_time_they_claim_in_proportion(stagger):
    # two saturating clients holding the GPU together, whose spans each cover the whole wall time,
    # reporting once a second a little apart: half each, not all each, whoever reports first
    together, gpu = metrics.GpuBusy(), object()
    conns = [SimpleNamespace(locks={}, id=1), SimpleNamespace(locks={}, id=2)]
    for c in conns:
        metrics.attached(c, gpu, 0.0, together)
        metrics.lock_stats(c, gpu).granted = 0.0
    _reports(together, conns, gpu, [(t + d, i, t + d) for t in range(1, 21)
                                    for i, d in ((0, 0.0), (1, stagger))])
    a, b = (metrics.busy_seconds(c.locks[gpu], 30.0) for c in conns)
    assert a == pytest.approx(10.0, rel=0.1) and b == pytest.approx(10.0, rel=0.1), (a, b)


@pytest.mark.parametrize("stagger", [0.001, 0.3])
def test_clients_granted_together_after_a_pause_are_shared_out_alike(stagger):
    # each warmed up alone and gave the GPU back (a small claim), then both were granted at t=3
    # and saturate it together, reporting once a second: the first to report is not favoured
    together, gpu = metrics.GpuBusy(), object()
    conns = [SimpleNamespace(locks={}, id=1), SimpleNamespace(locks={}, id=2)]
    for i, c in enumerate(conns):
        metrics.attached(c, gpu, 0.0, together)
        metrics.busy(c, gpu, 50_000_000, 0.5 + i * 0.5, together)
    for c in conns:
        metrics.lock_stats(c, gpu).granted = 3.0
    # as the library does: a first report soon after the grant (its interval reaches back to the
    # release), then one a second
    claims = [(3.06 + t + d, i, 0.08 + t) for t in range(0, 6) for i, d in ((0, 0.0), (1, stagger))]
    _reports(together, conns, gpu, claims)
    a, b = (metrics.busy_seconds(c.locks[gpu], 30.0) - 0.05 for c in conns)
    assert a == pytest.approx(2.5, rel=0.06) and b == pytest.approx(2.5, rel=0.06), (a, b)


def test_a_claim_waits_for_a_holder_that_has_not_reported_and_not_for_one_that_left():
    together, gpu = metrics.GpuBusy(), object()
    a, b = SimpleNamespace(locks={}, id=1), SimpleNamespace(locks={}, id=2)
    for c in (a, b):
        metrics.attached(c, gpu, 0.0, together)
        metrics.lock_stats(c, gpu).granted = 0.0
    metrics.busy(a, gpu, 1_000_000_000, 1.0, together)
    assert a.locks[gpu].busy == 0.0 and together.pending      # b may have run beside it
    together.left(b.id)
    assert metrics.busy_seconds(a.locks[gpu], 1.01) == pytest.approx(1.0)


def test_a_client_alone_or_beside_an_idle_one_keeps_its_whole_claim():
    together, gpu = metrics.GpuBusy(), object()
    busy, idle = SimpleNamespace(locks={}, id=1), SimpleNamespace(locks={}, id=2)
    metrics.attached(busy, gpu, 0.0, together)
    metrics.attached(idle, gpu, 0.0, together)
    metrics.busy(idle, gpu, 900_000_000, 1.0, together)             # busy until t=1, then idle
    _reports(together, [busy], gpu, [(1.0 + t, 0, 0.8 * t) for t in range(1, 8)])
    # the first report ([0, 2]) overlaps the idle client's ([0, 1]): rates 0.4 + 0.9 x 1/2, under
    # 1, nothing cut; the later ones do not overlap it
    assert metrics.busy_seconds(busy.locks[gpu], 20.0) == pytest.approx(0.8 * 7)


def test_clients_taking_turns_keep_their_whole_claims():
    # serial mode: each holds the GPU for 1 s in turn and reports every second while it holds
    together, gpu = metrics.GpuBusy(), object()
    conns = [SimpleNamespace(locks={}, id=1), SimpleNamespace(locks={}, id=2)]
    for c in conns:
        metrics.attached(c, gpu, 0.0, together)
    claims, totals = [], [0.0, 0.0]
    for t in range(1, 13):
        i = t % 2            # client i held [t-1, t]
        totals[i] += 0.98
        claims.append((float(t), i, totals[i]))
    _reports(together, conns, gpu, claims)
    for c, total in zip(conns, totals):
        assert metrics.busy_seconds(c.locks[gpu], 20.0) == pytest.approx(total, rel=0.02)


def test_the_clients_of_a_gpu_never_sum_to_more_than_its_wall_time():
    import random

    for seed in range(20):
        rnd = random.Random(seed)
        together, gpu = metrics.GpuBusy(), object()
        conns = [SimpleNamespace(locks={}, id=i) for i in range(rnd.randint(1, 6))]
        totals = [0.0] * len(conns)
        for c in conns:
            metrics.attached(c, gpu, 0.0, together)
        now = 0.0
        for _ in range(200):
            now += rnd.uniform(0.0, 0.7)
            i = rnd.randrange(len(conns))
            totals[i] += rnd.uniform(0.0, 1.5)  # claims as wild as a client may send
            metrics.busy(conns[i], gpu, int(totals[i] * 1e9), now, together)
            credited = sum(metrics.busy_seconds(c.locks[gpu], now) for c in conns)
            assert credited <= now + metrics.BUSY_SLACK_S + 1e-9, (seed, now, credited)


def test_busy_in_status_and_metrics_and_gone_with_the_client(metrics_scheduler):  # noqa: F811
    sched, port = metrics_scheduler
    a = registered(sched.socket)
    a.ctl("status")
    me = {"gpu": "", "uuid": uuid(0), "client": str(a.client_id), "pid": str(os.getpid())}
    assert value(scrape(port), "xpushare_client_gpu_busy_seconds_total", **me) == 0
    time.sleep(0.3)
    a.busy_update(busy_ns=200_000_000)
    st = a.ctl("status")
    g = st["clients"][0]["gpus"][0]
    assert abs(g["gpu_busy_seconds"] - 0.2) < 1e-6
    assert abs(value(scrape(port), "xpushare_client_gpu_busy_seconds_total", **me) - 0.2) < 1e-6
    a.busy_update(busy_ns=100_000_000)   # lower: ignored
    a.busy_update(busy_ns=10**15)        # far more than the time passed: cut
    st = a.ctl("status")
    busy = st["clients"][0]["gpus"][0]["gpu_busy_seconds"]
    assert 0.2 < busy < 0.2 + 60, busy
    assert "more than the wall time" in sched.log() or poll(
        lambda: "more than the wall time" in sched.log(), 5, 0.05, what="the clamp warning")
    a.close()
    poll(lambda: not sched.ctl("status")["clients"], 10, 0.02, what="the client to be forgotten")
    assert value(scrape(port), "xpushare_client_gpu_busy_seconds_total",
                 client=str(a.client_id)) is None


def test_welcome_offers_busy_updates_and_an_unattached_device_is_refused(start_scheduler):
    sched = start_scheduler("--no-nvml")
    a = registered(sched.socket, devices=())
    a.busy_update(device=3, busy_ns=5)
    assert a.expect(MessageType.ERROR)
    b = registered(sched.socket)
    assert b.ctl("status")["ok"]
    from sched_harness import FakeClient
    c = FakeClient(sched.socket)
    assert c.hello().features & FEATURE_BUSY


def test_a_flood_of_small_reports_does_not_add_up_their_slack():
    # 1000 reports a millisecond apart, each claiming 11 ms (within one report's wall time and its
    # 10 ms of slack): together no more than the second that passed, with the slack once
    conn, gpu = _conn(), object()
    metrics.attached(conn, gpu, 0.0)
    for k in range(1, 1001):
        metrics.busy(conn, gpu, k * 11_000_000, k * 0.001)
    assert conn.locks[gpu].busy <= 1.0 * metrics.BUSY_SLACK + metrics.BUSY_SLACK_S + 1e-9
