"""bench/switching/swap.py: how a run's requests become its summary and its table (no GPU)."""

from __future__ import annotations

from bench.switching import swap

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
