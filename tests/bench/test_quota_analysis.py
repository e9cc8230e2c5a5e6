"""bench/quotas/quota_analysis.py (a live limit change read from a trace) and bench/core/gpu_clocks.py (the
clock samples): pure functions, and the sampler with a stand-in nvidia-smi."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.core import gpu_clocks as gc
from bench.quotas import quota_analysis as qa

FAKE_SMI = Path(__file__).resolve().parent / "fake_nvidia_smi.py"
SOLO = 1000.0  # products/s: a rate of 10 * pct products/s is pct percent of solo


def make_trace(segments: list[tuple[float, float]], step: float = 0.01) -> list:
    """A trace through (until, percent of SOLO) segments, a point every `step` seconds."""
    trace, n, i = [[0.0, 0]], 0.0, 0
    for until, pct in segments:
        while (i + 1) * step <= until + 1e-9:
            i += 1
            n += SOLO * pct / 100 * step
            trace.append([round(i * step, 9), n])
    return trace


def test_products_at_interpolates_and_is_none_outside():
    trace = [[0.0, 0], [1.0, 100], [2.0, 100], [3.0, 400]]
    assert qa.products_at(trace, 0.5) == pytest.approx(50)
    assert qa.products_at(trace, 1.5) == pytest.approx(100)
    assert qa.products_at(trace, 2.5) == pytest.approx(250)
    assert qa.products_at(trace, 3.0) == pytest.approx(400)
    assert qa.products_at(trace, 0.0) == 0
    assert qa.products_at(trace, -0.1) is None and qa.products_at(trace, 3.01) is None
    assert qa.products_at([], 1.0) is None


@pytest.mark.parametrize("t_from,t_to,solo,expected", [
    (0.0, 1.0, 100.0, 100.0), (0.0, 2.0, 100.0, 50.0), (2.0, 3.0, 300.0, 100.0),
    (1.0, 2.0, 100.0, 0.0), (0.5, 3.5, 100.0, None), (1.0, 1.0, 100.0, None), (0.0, 1.0, None, None)])
def test_window_percent(t_from, t_to, solo, expected):
    trace = [[0.0, 0], [1.0, 100], [2.0, 100], [3.0, 400]]
    got = qa.window_percent(trace, t_from, t_to, solo)
    assert got == (None if expected is None else pytest.approx(expected))


# (what, segments of percent of solo, the second after the change, its goal met,
#  [lowest, highest] 1 s window from the change on, all of them met)
CASES = [
    ("drops at the change", [(3.0, 75), (8.0, 25)], 25.0, True, [25.0, 25.0], True),
    ("drops 0.1 s after", [(3.1, 75), (8.0, 25)], 30.0, False, [25.0, 30.0], False),
    ("settles within the points", [(3.0, 75), (3.2, 28), (8.0, 24)], 24.8, True, [24.0, 24.8], True),
    ("stays at 75 for 1.5 s", [(4.5, 75), (8.0, 25)], 75.0, False, [25.0, 75.0], False),
    ("a burst at 100% 3 s after", [(3.0, 75), (6.0, 25), (6.2, 100), (8.0, 25)], 25.0, True,
     [25.0, 40.0], False),
    ("settles too low", [(3.0, 75), (8.0, 20)], 20.0, False, [20.0, 20.0], False),
    ("never changes", [(8.0, 75)], 75.0, False, [75.0, 75.0], False),
]


@pytest.mark.parametrize("what,segments,first,effect_met,held,held_met", CASES,
                         ids=[c[0] for c in CASES])
def test_judge_live(what, segments, first, effect_met, held, held_met):
    v = qa.judge_live(make_trace(segments), 3.0, SOLO, 25)
    assert v["windows"]["before"] == pytest.approx(75.0)
    assert v["windows"]["first_s"] == pytest.approx(first)
    assert v["effect_met"] is effect_met
    assert v["held"] == pytest.approx(held)
    assert v["held_met"] is held_met


def test_the_spread_of_short_windows_shows_bursts():
    even = qa.judge_live(make_trace([(3.0, 75), (8.0, 25)]), 3.0, SOLO, 25)
    assert even["spread"] == pytest.approx([25.0, 25.0])
    bursts = [(3.0, 75)] + [seg for k in range(10) for seg in ((4.0 + 0.4 * k, 0), (4.1 + 0.4 * k, 100))]
    v = qa.judge_live(make_trace(bursts + [(8.0, 25)], step=0.01), 3.0, SOLO, 25)
    lo, hi = v["spread"]
    assert lo < 10 and hi > 40  # 100 ms of everything, then 300 ms of nothing


def test_judge_live_without_enough_trace():
    short = make_trace([(3.0, 75), (3.4, 25)])  # no 1 s window after the change fits
    v = qa.judge_live(short, 3.0, SOLO, 25)
    assert v["effect_met"] is False and v["held"] is None and v["held_met"] is False
    assert v["windows"]["first_s"] is None and v["spread"] is None
    assert qa.judge_live(short, 0.5, SOLO, 25)["windows"]["before"] is None  # before the start
    for trace, change, solo in ((None, 3.0, SOLO), (short, None, SOLO), (short, 3.0, None)):
        assert qa.judge_live(trace, change, solo, 25) == {
            "windows": {"before": None, "first_s": None, "second_s": None}, "effect_met": None,
            "held": None, "held_met": None, "spread": None}


def test_judge_gpu_time():
    assert qa.judge_gpu_time({"util_pct": 49.3}, 50) == {"util_pct": 49.3, "met": True}
    assert qa.judge_gpu_time({"util_pct": 55.8}, 50)["met"] is False
    assert qa.judge_gpu_time({}, 50) == {"util_pct": None, "met": None}
    assert qa.judge_gpu_time(None, 50) == {"util_pct": None, "met": None}


def test_all_met_counts_every_part_present():
    base = {"limits": {"none": {}, "25": {"met": True}},
            "shares": {"verdict": {"met": [True, True], "combined_met": True}}}
    assert qa.all_met(base) is True
    assert qa.all_met({**base, "graph": {"limited": {"met": True}}}) is True
    assert qa.all_met({**base, "graph": {"limited": {"met": False}}}) is False
    live = {"verdict": {"effect_met": True, "held_met": True}}
    assert qa.all_met({**base, "live": live}) is True
    assert qa.all_met({**base, "live": {"verdict": {"effect_met": False, "held_met": True}}}) is False
    assert qa.all_met({**base, "live": {"verdict": {"effect_met": True, "held_met": False}}}) is False
    assert qa.all_met({**base, "live": {}}) is False  # asked for, not measured
    gpu = {"limits": {"none": {}, "25": {"goal": "gpu_time", "throughput_met": True, "met": False}}}
    assert qa.all_met({**base, **gpu}) is False
    memory = {"none": {}, "50": {"met": False}}
    assert qa.all_met({**base, "memory_bound": memory}) is False
    assert qa.all_met({}) is False


# ----------------------------------------------------------------------------- clocks

def test_parse_line():
    wall = datetime(2026, 11, 24, 4, 0, 1, 250000)
    line = wall.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3] + ", 1755, 512.34, 100\n"
    s = gc.parse_line(line, wall_to_mono=-1000.0, arrival=5.0)
    assert s == {"t": pytest.approx(wall.timestamp() - 1000.0), "sm_mhz": 1755.0,
                 "power_w": pytest.approx(512.34), "util_pct": 100.0}
    na = gc.parse_line("not a time, 1980, [N/A], 3", 0.0, arrival=5.0)
    assert na == {"t": 5.0, "sm_mhz": 1980.0, "power_w": None, "util_pct": 3.0}
    assert gc.parse_line("No devices were found", 0.0, 5.0) is None
    assert gc.parse_line("2026/11/24 04:00:01.250, [N/A], [N/A], [N/A]", 0.0, 5.0) is None


def test_means_over_a_window():
    samples = [{"t": t, "sm_mhz": mhz, "power_w": w, "util_pct": 100.0}
               for t, mhz, w in ((0.0, 1000.0, 100.0), (1.0, 1400.0, 690.0), (2.0, 1800.0, None),
                                 (3.0, 300.0, 60.0))]
    m = gc.means(samples, 1.0, 2.0)
    assert m == {"samples": 2, "sm_mhz": 1600.0, "power_w": 690.0, "util_pct": 100.0}
    assert gc.means(samples, 5.0, 6.0) == {"samples": 0, "sm_mhz": None, "power_w": None,
                                           "util_pct": None}


def test_smi_argv(monkeypatch):
    argv = gc.smi_argv(3, smi="/usr/bin/nvidia-smi")
    assert argv[0] == "/usr/bin/nvidia-smi" and argv[-2:] == ["-i", "3"]
    assert "--query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu" in argv
    assert "-lms" in argv and "--format=csv,noheader,nounits" in argv
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gc.smi_argv(0) is None


def test_sampler_reads_a_stand_in_and_places_samples_on_the_monotonic_clock():
    t_start = time.monotonic()
    with gc.ClockSampler([sys.executable, str(FAKE_SMI)]) as sampler:
        time.sleep(0.6)
    t_end = time.monotonic()
    assert len(sampler.samples) >= 5
    assert all(t_start - 0.05 <= s["t"] <= t_end + 0.05 for s in sampler.samples)
    m = sampler.window(t_start, t_end)
    assert m["samples"] == len(sampler.samples)
    assert (m["sm_mhz"], m["power_w"], m["util_pct"]) == (1755.0, 512.5, 100.0)
    blank = gc.ClockSampler(None).start()
    blank.stop()
    assert blank.window(0.0, t_end) == {"samples": 0, "sm_mhz": None, "power_w": None, "util_pct": None}
