"""Each client's queueing delay (REQ_LOCK -> LOCK_OK) in `nvsharectl status` and the metrics: a
client that waits behind a holder is seen to have waited at least until the holder released, and a
client that never waited shows none. Orders come from round trips, not from timing."""

from __future__ import annotations

import os
import time

from sched_harness import MessageType, registered, uuid
from test_metrics import metrics_scheduler, scrape, value  # noqa: F401  (fixture)

from xpushare.scheduler.node import metrics


def _gpu_entry(status: dict, client_id: int) -> dict:
    client = next(c for c in status["clients"] if c["client_id"] == client_id)
    return client["gpus"][0]


def test_status_and_histogram_show_the_wait_behind_a_holder(metrics_scheduler):
    sched, port = metrics_scheduler
    a, b = registered(sched.socket), registered(sched.socket)
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    before = _gpu_entry(a.ctl("status"), b.client_id)["queueing_delay"]
    assert before["count"] == 0 and before["waiting"] is not None  # b waits now
    hold = 0.05
    time.sleep(hold)
    a.release()
    b.expect(MessageType.LOCK_OK)
    status = b.ctl("status")
    mine = _gpu_entry(status, b.client_id)["queueing_delay"]
    assert mine["count"] == 1 and mine["waiting"] is None
    assert mine["last"] == mine["p50"] == mine["p99"] == mine["max"] >= hold
    first = _gpu_entry(status, a.client_id)["queueing_delay"]
    assert first["count"] == 1 and first["max"] < hold  # a free GPU: granted at once
    s = scrape(port)
    me = {"gpu": "", "uuid": uuid(0), "client": str(b.client_id), "pid": str(os.getpid())}
    assert value(s, "xpushare_client_queueing_delay_seconds_count", **me) == 1
    assert value(s, "xpushare_client_queueing_delay_seconds_sum", **me) >= hold
    assert value(s, "xpushare_client_queueing_delay_seconds_bucket", **me, le="0.01") == 0
    assert value(s, "xpushare_client_queueing_delay_seconds_bucket", **me, le="+Inf") == 1


def test_the_table_shows_p50_and_p99(metrics_scheduler, capsys):
    from xpushare.cli.ctl_render import render_status
    sched, _ = metrics_scheduler
    a = registered(sched.socket)
    a.request()
    a.expect(MessageType.LOCK_OK)
    status = a.ctl("status")
    render_status(status, width=250)
    out = capsys.readouterr().out
    assert "Wait" in out
    q = _gpu_entry(status, a.client_id)["queueing_delay"]
    from xpushare.cli.ctl_render import millis
    assert f"{millis(q['p50'])}/{millis(q['p99'])}" in out


def test_summary_over_the_recent_window_by_nearest_rank():
    stats = metrics.LockStats()
    for ms in range(1, 301):  # more than the window: the oldest 44 are out of it
        stats.requested = 0.0
        stats.recent_waits.append(ms / 1000)
        stats.queueing.observe(ms / 1000)
    stats.requested = None
    q = metrics.queueing_delay(stats, 1.0)
    window = list(range(301 - metrics.RECENT_WAITS, 301))
    assert q["count"] == 300 and q["last"] == 0.3 and q["max"] == 0.3
    assert q["p50"] == window[len(window) // 2 - 1] / 1000
    assert q["p99"] == window[-3] / 1000  # ceil(256 * 0.99) = 254th of 256
    assert metrics.queueing_delay(None, 1.0)["p50"] is None
