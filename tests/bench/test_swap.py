"""bench/switching/swap.py: how a run's requests become its summary and its table (no GPU)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from bench.switching import swap, swap_arms, swap_procs

GIB = 1 << 30
RATE = 50e9  # bytes/s, both directions


def _row(ms, server="a", swapped=True, moved_in=8 * GIB, left=8 * GIB, copied=8 * GIB, evict_ms=180.0,
         swapin_ms=220.0, same=True, resident_after=11 * GIB, capacity=12 * GIB, pattern="alternating"):
    bus = moved_in / RATE + copied / RATE
    return {"server": server, "pattern": pattern, "ms": ms, "same": same, "swapped": swapped,
            "moved_in": moved_in, "left": left, "copied_out": copied, "evict_ms": evict_ms,
            "swapin_ms": swapin_ms, "one_way_ms": moved_in / RATE * 1e3,
            "bound_ms": (swap.BOUND * bus * 1e3 + 3.0) if swapped else None,
            "resident_after": resident_after, "capacity": capacity, "repeat": False}


def test_a_run_within_its_bounds_is_summarised_as_met():
    rows = [_row(400.0), _row(410.0, server="b"), _row(190.0, copied=0, evict_ms=12.0),
            _row(3.0, swapped=False, pattern="random")]
    s = swap.summarise(rows, [3.0, 3.1], 3.0, [(8 * GIB, 8 * GIB, 4000.0)], RATE, RATE)
    assert s["swapped_ms"]["n"] == 3 and s["all_within_bound"] is True and s["all_identical"] is True
    # eviction bandwidth only from the evictions that copied everything: 8 GiB in 180 ms
    assert abs(s["evict_ratio"]["p50"] - (8 * GIB / 0.180) / RATE) < 1e-9
    assert s["clean_evict_ms"] == {"p50": 12.0, "n": 1}
    assert abs(s["stretch_ratio"]["max"] - 190.0 / (8 * GIB / RATE * 1e3)) < 1e-9
    assert s["resident_over_capacity"] == 0 and s["resident_checked"] == 4
    assert s["alternating_swapped"] == 3 and s["alternating_n"] == 3
    assert s["cold_evictions"][0]["ratio"] < 0.2


def test_a_slow_swap_a_wrong_response_and_an_overfull_gpu_are_each_reported():
    rows = [_row(900.0), _row(400.0, same=False), _row(400.0, resident_after=13 * GIB)]
    s = swap.summarise(rows, [3.0], 3.0, [], RATE, RATE)
    assert s["all_within_bound"] is False and s["latency_over_bound_max"] > 1.0
    assert s["all_identical"] is False
    assert s["resident_over_capacity"] == 1


def test_the_table_has_one_row_per_run_with_every_column():
    rows = [_row(400.0), _row(3.0, swapped=False)]
    result = {"gib": 8, "swap_store": True, "rewrite": True, "capacity": 12 * GIB,
              **swap.summarise(rows, [3.0], 3.0, [], RATE, RATE)}
    table = swap.report([result]).splitlines()
    assert len(table) == 3
    assert table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert "| 8 | swap store | rewritten |" in table[2]


def test_capacity_holds_one_server_but_not_two():
    from bench.core.gpu_memory import fits_together
    for gib in (2, 8, 18):
        budget = int(swap.capacity_for(gib) * 0.95)
        footprint = gib * GIB + 64 * 2**20  # the weights and the little else a server allocates
        assert fits_together([footprint], budget) and not fits_together([footprint] * 2, budget)


# --pin-ahead-arms: options, the order of the arms, and a whole run of each arm with fake servers


def test_the_arms_options_parse_and_default_the_newcomers_wait():
    args = swap.parse_args(["--real", "--sizes", "8", "--pin-ahead-arms", "--repeats", "2"])
    assert args.sizes == [8] and args.pin_ahead_arms and args.repeats == 2
    assert args.load_after == swap_arms.LOAD_AFTER_S
    assert swap.parse_args(["--load-after", "1.5"]).load_after == 1.5
    assert swap.parse_args([]).load_after is None  # without the arms the newcomer loads at once, as before
    for bad in (["--repeats", "0"], ["--load-after", "-1"], ["--sizes", "20"]):
        with pytest.raises(SystemExit):
            swap.parse_args(bad)


def test_each_arm_goes_first_as_often_and_the_driver_prefetch_runs_once():
    plan = swap.plan_runs(swap.parse_args(["--sizes", "8", "--pin-ahead-arms", "--repeats", "2",
                                           "--compare-off"]))
    assert plan[:4] == [(8, True, False, True, 0), (8, True, False, False, 0),
                        (8, True, True, False, 0), (8, True, True, True, 0)]
    assert plan[4] == (8, False, True, None, None)
    assert plan[5:] == [(8, True, False, False, 1), (8, True, False, True, 1),
                        (8, True, True, True, 1), (8, True, True, False, 1)]
    pairs = [plan[i:i + 2] for i in (0, 2, 5, 7)]
    assert sum(p[0][3] for p in pairs) == 2  # the hint first in half of the pairs
    for data in (False, True):  # and each data kind's two repetitions in both orders
        assert {p[0][3] for p in pairs if p[0][2] is data} == {True, False}
    assert [r[3:] for r in swap.plan_runs(swap.parse_args(["--sizes", "8"]))] == [(None, None)] * 2


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """run_size against tests/bench/fake_swap_server.py and a real scheduler without NVML; the fake
    servers pin ahead unless the scheduler was given --no-pin-ahead."""
    from bench.core.common import harness
    from bench.core.protoclient import children_can_import_xpushare

    children_can_import_xpushare()
    started = []

    class Scheduler(harness.Scheduler):
        def __init__(self, *, extra_args=(), **kw):
            started.append(extra_args)
            super().__init__(extra_args=("--no-nvml", *extra_args), **kw)

    def library_env(lib, sock, **_):
        shared = Path(tempfile.mkdtemp(dir=tmp_path))
        return harness.native_env(FAKE_SWAP_DIR=shared,
                                  FAKE_PIN_AHEAD=int("--no-pin-ahead" not in started[-1]))

    monkeypatch.setattr(swap_procs, "SERVER", Path(__file__).with_name("fake_swap_server.py"))
    monkeypatch.setattr(harness, "Scheduler", Scheduler)
    monkeypatch.setattr(harness, "library_env", library_env)
    return started


def test_both_arms_report_each_servers_first_eviction_against_the_pinned_copy(fake_bench, tmp_path):
    results = [swap.run_size(8, 2, 0.0, True, False, Path("/nonexistent.so"), 7, pin_ahead=arm,
                             load_after=0.6, rep=0) for arm in (True, False)]
    assert ["--no-pin-ahead" in a for a in fake_bench] == [False, True]
    on, off = results
    assert on["newcomer"]["pinned_before_load"] and on["newcomer"]["pinned_ahead_mib"] == 8 * 1024 + 64
    assert 0.1 < on["newcomer"]["pinned_ahead_s"] < 0.6 and on["newcomer"]["load_after_s"] == 0.6
    assert off["newcomer"]["pinned_ahead_s"] is None and not off["newcomer"]["pinned_before_load"]
    for r in results:
        assert [c["server"] for c in r["cold_evictions"]] == ["a", "b"] and r["all_identical"]
        assert r["pin_ahead"] is (r is on) and r["swapped_ms"]["n"] >= 2
    size = 8 * GIB + (64 << 20)
    pinned_ms = size / (8 * GIB) * off["reference_ms"]["d2h"]  # the pinned D2H copy of those bytes
    cold_a = {r["pin_ahead"]: r["cold_evictions"][0] for r in results}
    assert cold_a[True]["ms"] == 200.0 and cold_a[False]["ms"] == 800.0
    assert abs(cold_a[False]["pinned_ms"] - pinned_ms) < 1e-6
    assert abs(cold_a[False]["ratio"] - pinned_ms / 800.0) < 1e-9
    text = swap.render(results)
    assert "| 8 | swap store | not written |" in text and "| 8 | swap store, --no-pin-ahead | not written |" in text
    arms = swap_arms.report(results).splitlines()
    assert arms[0].count("|") == arms[1].count("|") == arms[2].count("|") == arms[3].count("|")
    assert "| 8 | not written | on | 0 | 0.6 |" in arms[2] and "/ 0.2" in arms[2] and "(8256) |" in arms[2]
    assert "| off (--no-pin-ahead) | 0 | 0.6 | - / - (0) |" in arms[3]
    assert f"200 ms / {pinned_ms:.0f} ms: {pinned_ms / 200:.2f}" in arms[2]
    summary = [ln for ln in arms if ln.startswith("S = 8 GiB")]
    assert len(summary) == 2 and "server a's" in summary[0] and "off / on time 4.00" in summary[0]
    assert "off / on time 1.00" in summary[1]  # b's first eviction: not pinned ahead in the fake
    # --render gives the same tables from the JSON
    path = tmp_path / "swap.json"
    path.write_text(json.dumps({"results": results}))
    assert swap_arms.report(swap.rerender(path)) == swap_arms.report(results)


def test_the_server_waits_for_load_before_it_allocates():
    src = (swap_procs.SERVER).read_text()
    assert "--wait-before-load" in src and '"ATTACHED"' in src
    assert src.index('print("ATTACHED"') < src.index("torch.randn(ROWS")  # the context before the weights
