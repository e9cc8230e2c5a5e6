"""bench/scheduling/sched_latency.py: statistics, the raw-socket baseline, and a short run against a real scheduler."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from bench.scheduling import sched_latency as sl


def test_summary():
    s = sl.summary([5.0, 1.0, 3.0])
    assert (s["n"], s["p50"], s["min"], s["max"], s["mean"]) == (3, 3.0, 1.0, 5.0, 3.0)
    assert sl.summary([])["p99"] is None


def test_ratios_to_the_baseline():
    assert sl.ratios({"p50": 30.0, "p99": 90.0}, {"p50": 10.0, "p99": 30.0}) == {"p50": 3.0, "p99": 3.0}
    assert sl.ratios({"p50": 1.0, "p99": 1.0}, {"p50": 0.0, "p99": None}) == {"p50": None, "p99": None}


def test_plan_keeps_at_least_2000_samples():
    assert sl.plan(False, None) == {"cycles": 5000, "handoffs": 3000, "queue_wait_s": 0.001}
    for quick, left in ((True, None), (False, 5.0)):
        p = sl.plan(quick, left)
        assert p["cycles"] >= 2000 and p["handoffs"] >= 2000


def test_baseline_ping_pong_moves_the_bytes(tmp_path: Path):
    base = sl.Baseline(tmp_path)
    try:
        rtts, cycles = base.ping_pong(56, 28, 36, 50)
        assert len(rtts) == 50 and len(cycles) == 49 and all(v > 0 for v in rtts)
        rtts, _ = base.ping_pong(36, 28, 0, 20)        # a second connection to the same server
        assert len(rtts) == 20
    finally:
        base.stop()
    assert base.proc.poll() is not None


def test_a_short_run_through_the_scheduler():
    r = sl.measure(cycles=100, handoffs=50, queue_wait_s=0.001)
    assert r["parameters"]["frame_bytes"] == {"request": 56, "reply": 28, "trailing": 36}
    assert r["uncontended"]["round_trip_us"]["n"] == 100
    assert r["uncontended"]["cycle_us"]["n"] == 99
    assert r["contended"]["grant_us"]["n"] == 50
    assert r["baseline"]["round_trip_us"]["n"] == 100
    for name in ("round_trip", "cycle", "grant"):
        assert r["ratios"][name]["p50"] > 0
    assert len(r["samples_us"]["grant"]) == 50
    json.dumps(r)  # the result is JSON as it is


def test_cli_refuses_too_few_samples():
    for argv in (["--cycles", "100"], ["--handoffs", "10"], ["--queue-wait", "-1"]):
        with pytest.raises(SystemExit) as e:
            sl.main(argv)
        assert e.value.code == 2


def test_the_baseline_socket_appears_only_once_it_listens(tmp_path, monkeypatch):
    """Its path is how the benchmark knows it may connect: a connect between bind() and listen()
    would be refused (the load test failed that way)."""
    import socket as socket_module

    path = tmp_path / "baseline.sock"
    seen = {}

    class Stop(Exception):
        pass

    class Watched(socket_module.socket):
        def listen(self, *args):
            seen["path_before_listen"] = path.exists()
            return super().listen(*args)

        def accept(self):
            seen["path_when_serving"] = path.exists()
            raise Stop

    monkeypatch.setattr(sl.socket, "socket", Watched)
    try:
        with pytest.raises(Stop):
            sl.serve_baseline(path)
    finally:
        gc.enable()  # the server turns the collector off for its ping-pong
    assert seen == {"path_before_listen": False, "path_when_serving": True}
