"""bench/switching/switch_cost.py: the pure parts (progress lines, log parsing, per-cycle analysis, headline,
planning, arguments), and the whole benchmark against a real scheduler with a stand-in for A (no GPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.core import schedlog
from bench.switching import switch_cost as sc
from bench.switching import switch_measure as sm
from bench.switching import switch_worker as sw
from bench.core.common import harness
from testkit.waiting import poll

FAKE_A = Path(__file__).resolve().parent / "fake_switch_a.py"


def test_progress_lines_round_trip_and_torn_lines_are_ignored():
    line = f"{sw.size_key(4.0)} 17 123.456789".ljust(sw.PROGRESS_BYTES - 1).encode() + b"\n"
    assert sw.parse_progress(line) == ("4", 17, 123.456789)
    assert sw.parse_progress(b"") is None
    assert sw.parse_progress(b"4 17") is None
    assert sw.parse_progress(b"4 x 1.0") is None


def ms_of(text):
    return schedlog.ms(schedlog.duration_s(text))


def test_durations_from_log_fields():
    assert ms_of("170.0ms") == 170.0
    assert ms_of("1.23s") == pytest.approx(1230.0)
    assert ms_of("500us") == pytest.approx(0.5)
    assert ms_of(None) is None
    assert ms_of("yes") is None
    assert ms_of("fastms") is None


def steady_passes(start: float, n: int, step: float = 0.01) -> list[tuple[float, float]]:
    return [(start + i * step, start + (i + 1) * step) for i in range(n)]


def test_a_cycle_seen_from_the_passes():
    passes = steady_passes(0.0, 10)                      # 10 ms passes until 0.1
    passes.append((0.1, 0.5))                            # interrupted by the switch
    passes += [(0.5, 0.515), (0.515, 0.525)]             # one slow pass, then full speed
    passes += steady_passes(0.525, 5)
    steady = sm.steady_pass_s(passes, before=0.105)
    assert steady == pytest.approx(0.01)
    c = sm.analyse_cycle(passes, t_req=0.105, t_rel=0.3, steady_s=steady)
    assert c["switch_ms"] == pytest.approx(200.0)
    assert c["first_pass_ms"] == pytest.approx(400.0)
    assert c["handoff_ms"] == pytest.approx(195.0)
    assert c["recovered_ms"] == pytest.approx(225.0)     # the 15 ms pass is not full speed yet
    starts = [w[0] for w in c["window"]]
    assert starts == sorted(starts) and any(s < 0 for s in starts) and any(s > 0 for s in starts)


def test_a_cycle_without_a_pass_after_the_release_is_an_error():
    assert "error" in sm.analyse_cycle(steady_passes(0.0, 5), 0.01, 1.0, 0.01)


def ev(t: float, kind: str, **fields: str) -> harness.Event:
    return harness.Event(t, kind, 1, fields)


def test_log_lines_of_a_cycle():
    events = [ev(0.5, "grant", prefetch="no"),
              ev(1.0, "release", reason="idle", drain="0.1ms", evict="0.0ms", prefetch="0.0ms"),
              ev(2.01, "drop", reason="preempted", evict="yes"),
              ev(2.3, "release", reason="dropped", drain="3.0ms", evict="250.0ms", prefetch="0.0ms"),
              ev(2.41, "grant", prefetch="yes"),
              ev(5.0, "drop", reason="preempted", evict="yes"),
              ev(5.2, "release", reason="dropped", drain="2.0ms", evict="240.0ms", prefetch="95.5ms")]
    m = sm.match_log(events, t_req=2.0, t_rel=2.4)
    assert (m["drop_reason"], m["evict_flag"]) == ("preempted", "yes")
    assert (m["drain_ms"], m["evict_ms"]) == (3.0, 250.0)
    assert m["regrant_prefetch"] == "yes" and m["regrant_t"] == 2.41
    assert sm.prefetch_of_regrant(events, m["regrant_t"]) == 95.5   # reported at the next release
    assert sm.prefetch_of_regrant(events, None) is None
    assert sm.match_log([], 0, 1)["evict_ms"] is None


def size_row(ms: float) -> dict:
    return {"switch_ms": ms}


def test_headline_ratios_and_the_faster_bulk_variant():
    variants = {"wait": {"sizes": {"1": size_row(20.0), "8": size_row(200.0)}},
                "overlap": {"sizes": {"1": size_row(25.0), "8": size_row(150.0)}},
                "off": {"sizes": {"1": size_row(240.0), "8": size_row(1000.0)}}}
    h = sm.headline(variants, copy_ms_per_gib=18.0)
    assert h["1"]["demand_vs_wait"] == pytest.approx(12.0)
    assert h["1"]["faster_bulk"] == "wait" and h["1"]["copy_ms"] == pytest.approx(18.0)
    assert h["1"]["bulk_vs_copy"] == pytest.approx(20 / 18) and h["1"]["goal_met"] is True
    assert h["8"]["faster_bulk"] == "overlap"
    assert h["8"]["demand_vs_bulk"] == pytest.approx(1000 / 150)
    assert h["8"]["bulk_vs_copy"] == pytest.approx(150 / 144)   # the faster bulk variant over the copy
    slow = sm.headline({"wait": {"sizes": {"1": size_row(23.0)}}}, copy_ms_per_gib=18.0)
    assert slow["1"]["goal_met"] is False                        # 1.28x the copy: not the bus's speed


def test_without_the_copy_reference_there_is_no_goal():
    h = sm.headline({"wait": {"sizes": {"1": size_row(20.0)}}, "off": {"sizes": {"1": size_row(90.0)}}})
    assert h["1"]["demand_vs_bulk"] == pytest.approx(4.5)
    assert h["1"]["copy_ms"] is None and h["1"]["goal_met"] is None


def test_demand_faults_run_without_the_swap_store(tmp_path: Path):
    command = sm.library_worker(tmp_path / "libnvshare.so")
    envs = {v: command(v, [1.0], tmp_path, 10, tmp_path / "sock", 8 << 30)[1] for v in ("wait", "off")}
    assert envs["off"]["NVSHARE_PREFETCH"] == "off" and envs["off"]["NVSHARE_SWAP"] == "off"
    assert envs["wait"]["NVSHARE_PREFETCH"] == "wait" and "NVSHARE_SWAP" not in envs["wait"]


def test_a_sizes_first_cycle_is_cold_and_kept_out_of_the_medians():
    cycles = [{"switch_ms": 2370.0, "handoff_ms": 900.0, "prefetch_ms": 1270.0},
              {"switch_ms": 182.8, "handoff_ms": 172.0, "prefetch_ms": 174.0}]
    row = sm.summarise_size(cycles, 0.004, True, 40)
    assert row["switch_ms"] == pytest.approx(182.8) and row["prefetch_ms"] == pytest.approx(174.0)
    assert row["cold_switch_ms"] == pytest.approx(2370.0) and row["cold_counted"] is False
    assert row["switch_ms_all"] == [2370.0, 182.8]
    alone = sm.summarise_size(cycles[:1], 0.004, True, 20)          # one cycle: it is all there is
    assert alone["switch_ms"] == pytest.approx(2370.0) and alone["cold_counted"] is True


def test_headline_with_a_variant_missing():
    h = sm.headline({"wait": {"sizes": {"1": size_row(20.0)}}, "off": {"error": "A did not start"}})
    assert h["1"]["demand_vs_bulk"] is None and h["1"]["goal_met"] is None


def test_plan_fits_the_time():
    full = sm.plan(False, None)
    assert full["sizes"] == [1.0, 4.0, 8.0] and full["cycles"] == 3
    assert sm.plan(True, None)["cycles"] == 2
    assert sm.plan(False, 80)["estimate_s"] <= 80
    short = sm.plan(False, 45)
    assert short["cycles"] >= 1 and short["dropped_sizes"] and short["sizes"][0] == 1.0
    assert sm.estimate_s([1.0], 3) < sm.estimate_s([1.0, 8.0], 3) < sm.estimate_s([1.0, 8.0], 3, ("off",)) * 3


def test_arguments():
    assert sc.parse_sizes("1,4,8") == [1.0, 4.0, 8.0]
    for bad in ("0", "17", "a", ""):
        with pytest.raises(Exception):
            sc.parse_sizes(bad)
    assert sc.parse_variants("off,wait") == ("off", "wait")
    with pytest.raises(Exception):
        sc.parse_variants("bulk")
    for argv in (["--sizes", "20"], ["--cycles", "0"], ["--variants", "x"]):
        with pytest.raises(SystemExit) as e:
            sc.main(argv)
        assert e.value.code == 2


def fake_a(variant, sizes, ctrl, warm_passes, sock, capacity):
    argv = [sys.executable, str(FAKE_A), "--sizes", ",".join(sw.size_key(w) for w in sizes), "--control", str(ctrl),
            "--warm-passes", str(warm_passes), "--socket", str(sock), "--capacity", str(capacity),
            "--uuid", "GPU-00000000-0000-0000-0000-0000000000fa"]
    return argv, {**os.environ, "NVSHARE_PREFETCH": variant}


@pytest.mark.timeout(120)
def test_the_benchmark_end_to_end_with_a_stand_in_for_a():
    """Mode auto, B of priority 10 preempts A with EVICT, A is granted again with PREFETCH."""
    from bench.core.protoclient import children_can_import_xpushare

    children_can_import_xpushare()
    result = sm.measure(fake_a, [1.0, 2.0], cycles=2, variants=("wait", "off"), warm_passes=10,
                        scheduler_args=("--no-nvml",))
    for variant in ("wait", "off"):
        v = result["variants"][variant]
        assert "error" not in v, v
        for key in ("1", "2"):
            row = v["sizes"][key]
            assert len(row["switch_ms_all"]) == 2 and row["data_ok"] is True
            assert row["evict_flags"] == ["yes", "yes"]
            assert row["regrant_prefetch"] == ["yes", "yes"]
            assert all(c["drop_reason"] == "preempted" for c in row["cycles"])
            assert row["evict_ms"] is not None and row["steady_pass_ms"] is not None
            assert row["b_footprint_bytes"] < result["parameters"]["capacity_gib"] * sm.GIB
    h = result["headline"]
    # The stand-in brings 1 GiB back in 10 ms with PREFETCH and in 100 ms without.
    assert h["1"]["off_ms"] > h["1"]["wait_ms"]
    assert h["2"]["off_ms"] > h["2"]["wait_ms"]


@pytest.mark.timeout(120)
def test_out_of_time_skips_the_rest_and_a_still_ends_cleanly():
    import time

    from bench.core.protoclient import children_can_import_xpushare

    children_can_import_xpushare()
    result = sm.measure(fake_a, [1.0, 2.0], cycles=3, variants=("wait", "off"), warm_passes=10,
                        deadline=time.monotonic(), scheduler_args=("--no-nvml",))
    wait = result["variants"]["wait"]
    assert "error" not in wait, wait
    assert len(wait["sizes"]["1"]["switch_ms_all"]) == 1        # the first cycle only
    assert wait["sizes"]["2"] == {"error": "skipped: out of time"}
    assert result["variants"]["off"] == {"error": "skipped: out of time"}
    assert result["headline"]["1"]["off_ms"] is None


def test_worker_follows_the_control_files(tmp_path: Path, monkeypatch):
    """A's loop with PyTorch on the CPU standing in for the GPU: steady file, progress, stop, dump."""
    import json
    import threading
    import types

    torch = pytest.importorskip("torch")
    fake = types.SimpleNamespace(
        device=lambda name: "cpu", float32=torch.float32,
        zeros=lambda n, dtype=None, device=None: torch.zeros(n, dtype=dtype),
        cuda=types.SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake)
    sizes = [0.001, 0.002]
    done = []
    thread = threading.Thread(target=lambda: done.append(sw.worker(sizes, tmp_path, warm_passes=3)), daemon=True)
    thread.start()
    for w in sizes:
        key = sw.size_key(w)
        poll(lambda: (tmp_path / f"steady-{key}").exists(), timeout=20.0, interval=0.005)
        progress = sm.Progress(tmp_path / "progress")
        poll(lambda: (p := progress.read()) and p[0] == key and p[1] >= 3, timeout=20.0, interval=0.005)
        progress.close()
        (tmp_path / f"stop-{key}").touch()
        poll(lambda: (tmp_path / f"passes-{key}.json").exists(), timeout=20.0, interval=0.005)
        dump = json.loads((tmp_path / f"passes-{key}.json").read_text())
        assert dump["data_ok"] is True and dump["max"] == len(dump["passes"]) >= 3
        assert all(t0 <= t1 for t0, t1 in dump["passes"])
    thread.join(10)
    assert done == [0]


def test_a_failed_copy_reference_leaves_the_switches_measured_with_no_goal(monkeypatch):
    def fails(gib, timeout):
        raise RuntimeError("the pinned copies failed (exit 1): no GPU")
    monkeypatch.setattr(sc, "reference", fails)
    copy = sc.copy_reference(8.0)
    assert copy["gib"] == 8 and "no GPU" in copy["error"]
    result = {"variants": {"wait": {"sizes": {"1": size_row(24.0)}}, "off": {"sizes": {"1": size_row(100.0)}}}}
    sc.with_copy(result, copy)
    row = result["headline"]["1"]
    assert row["goal_met"] is None and row["demand_vs_bulk"] == pytest.approx(100 / 24)
    line = next(r for r in sc.goals(result) if "switch back of 1 GiB" in r)
    assert "not measured: `RuntimeError: the pinned copies failed (exit 1): no GPU`" in line
