"""bench/scheduling/load.py and bench/core/loadgen.py: the handoff arithmetic, and short runs against real schedulers
(N = 1, 3, 10) whose results must account for every client, cycle and handoff. No timing thresholds."""

from __future__ import annotations

import json

import pytest

from bench.scheduling import load
from bench.scheduling import load_report
from bench.core import loadgen
from bench.core.daemon import Daemon


def test_handoffs_pair_each_release_with_the_grant_it_let_through():
    burst = {"order": [2, 0, 1], "granted_us": [30.0, 50.0, 10.0], "released_us": [12.0, 31.0, 52.0]}
    assert load.handoffs(burst, 1) == [30.0 - 12.0, 50.0 - 31.0]    # serial: the next grant
    assert load.handoffs(burst, 2) == [50.0 - 12.0]                 # two hold together
    assert load.handoffs(burst, None) == []                         # all granted at once


def test_how_many_hold_together_per_mode():
    assert load.admitted_together("serial", 1000) == 1
    assert load.admitted_together("off", 1000) is None
    fit = load.admitted_together("auto", 1000)
    assert fit is not None and 1 < fit < 1000                      # 16 GiB, 768 MiB of context each
    assert load.admitted_together("auto", fit) is None


def test_plan_scales_loops_down_when_short_of_time():
    full, short = load.plan(False), load.plan(False, time_left=60)
    assert full["loop_s"] == {"1": 5.0, "100": 10.0, "1000": 20.0}
    assert all(short["loop_s"][n] < full["loop_s"][n] for n in full["loop_s"])
    assert load.think_s(1) == 0.0 and load.think_s(1000) == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["serial", "off"])
def test_generator_registers_loops_and_bursts(mode):
    frames = loadgen.Frames(load.FAKE_UUID)
    with Daemon(mode) as d:
        clients, reg = loadgen.register(d.socket, 10, frames)
        try:
            assert len(reg) == 10 and all(v > 0 for v in reg)
            loop = loadgen.closed_loop(clients, frames, 0.5, 0.01)
            assert loop["rtt_us"] and all(v > 0 for v in loop["rtt_us"])
            assert not any(c.waiting for c in clients)               # every open request collected
            b = loadgen.burst(clients, frames)
            assert sorted(b["order"]) == list(range(10)) and len(b["released_us"]) == 10
            assert all(g >= r for g, r in zip(b["granted_us"], b["requested_us"]))
        finally:
            loadgen.close(clients)
        assert d.alive() and d.problems() == {"Traceback": 0, "internal error": 0}


def test_one_client_back_to_back_is_granted_every_cycle_and_releases_the_last_grant():
    frames = loadgen.Frames(load.FAKE_UUID)
    with Daemon("serial") as d:
        clients, _ = loadgen.register(d.socket, 2, frames)
        try:
            loop = loadgen.back_to_back(clients[0], frames, 0.3)
            assert len(loop["rtt_us"]) > 10 and all(v > 0 for v in loop["rtt_us"])
            # serial mode: the other client is granted only if the last cycle's release went out
            other = clients[1].sock
            other.setblocking(True)
            other.sendall(frames.request)
            assert loadgen.read_frame(other)[0] == loadgen.LOCK_OK
        finally:
            loadgen.close(clients)
        assert d.alive() and d.problems() == {"Traceback": 0, "internal error": 0}


def test_a_tiny_run_accounts_for_every_client_and_handoff():
    p = {**load.plan(True, sizes=(1, 3), modes=("serial", "auto")), "loop_s": {"1": 0.3, "3": 0.5}, "rounds": 2}
    r = load.measure(p)
    for mode in ("serial", "auto"):
        for n in (1, 3):
            e = r["modes"][mode][str(n)]
            assert e["registered"] == n and e["registration_us"]["n"] == n
            assert e["cycles"] == e["round_trip_us"]["n"] > 0
            assert e["burst"]["wait_us"]["n"] == 2 * n and len(e["burst"]["serve_all_ms"]) == 2
            assert e["alive_at_end"] and not any(e["log_problems"].values())
            assert e["ratios"]["round_trip"]["p50"] > 0
    assert r["modes"]["serial"]["3"]["burst"]["handoff_us"]["n"] == 2 * (3 - 1)
    assert r["modes"]["auto"]["3"]["burst"]["handoff_us"] is None  # all three fit together
    assert r["baseline"]["round_trip_us"]["n"] > 0 and r["parameters"]["max_connections_per_uid"] == 0
    json.dumps(r)
    rows = load_report.goals(r)
    assert len(rows) == 2 * 2 and all("not in this run" in row for row in rows if "1000" in row)
    assert "| serial | 3 | 3 |" in load_report.section(r)


def test_report_of_a_failed_run():
    assert "not measured" in load_report.goals({"error": "boom"})[0]


def test_cli_refuses_bad_arguments():
    for argv in (["--modes", "fast"], ["--sizes", "0"]):
        with pytest.raises(SystemExit) as e:
            load.main(argv)
        assert e.value.code == 2
