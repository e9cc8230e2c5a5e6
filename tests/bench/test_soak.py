"""bench/scheduling/soak.py: a short soak (a few hundred frames and requests) against a real scheduler must account
for everything sent, sample the daemon's RSS and the probe, and put the settings back. No timing
thresholds."""

from __future__ import annotations

import json
import random

from bench.scheduling import soak
from bench.scheduling import soak_fuzz
from bench.scheduling import soak_report


def test_tasks_carry_every_frame_and_request_once():
    p = {**soak.plan(True, frames=450, requests=95)}
    todo = soak_fuzz.tasks(p, random.Random(1))
    frames = sum(len(items) for fn, items in todo if fn is soak_fuzz._frames)
    requests = sum(len(items) for fn, items in todo if fn is soak_fuzz._requests)
    assert (frames, requests) == (450, 95)
    assert sum(fn is soak_fuzz._requests for fn, _ in todo) == 3    # 40, 40, 15 to a connection


def test_a_short_soak():
    r = soak.measure({**soak.plan(True, frames=300, requests=200), "quiet_s": 0.5, "settle_s": 1.0})
    sent = r["sent"]
    assert sent["frames"] == 300 == sent["closed_by_scheduler"] + sent["timeouts"] + sent["refused"]
    assert sent["requests"] == sent["answered"] == 200 and sent["bad_replies"] == 0
    rss = r["rss_kib"]
    assert all(rss[k] > 0 for k in ("start", "max", "end")) and rss["max"] >= rss["start"]
    assert rss["delta"] == rss["end"] - rss["start"] and rss["samples"] and len(rss["growth_by_half"]) == 2
    probe = r["probe"]
    assert probe["cycles"] > 0 and probe["failures"] == [] and probe["quiet_us"]["n"] > 0
    assert probe["after_us"]["n"] > 0                                # served after the restore too
    assert r["alive_at_end"] and r["restored"] == {"set_mode": True, "set_tq": True, "set_gpu_memory": True}
    assert r["log"]["Traceback"] == 0 and r["log"]["internal error"] == 0 and r["log"]["gpus_learnt"] >= 1
    assert None not in rss["growth_by_half"]
    json.dumps(r)
    rows = soak_report.goals(r)
    assert len(rows) == 3 and "not measured" not in "".join(rows)
    assert "malformed frames sent" in soak_report.section(r)


def test_report_of_a_failed_run():
    assert "not measured" in soak_report.goals({"error": "boom"})[0]
