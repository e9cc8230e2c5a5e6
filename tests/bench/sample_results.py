"""Results of the shapes the benchmarks return, for rendering tests (numbers made up)."""

from __future__ import annotations

import copy


def _lat(p50: float, p99: float, n: int = 2000) -> dict:
    return {"n": n, "p50": p50, "p90": (p50 + p99) / 2, "p99": p99, "mean": p50, "min": p50 / 2, "max": p99 * 2}


def _switch_size(switch_ms: float, steady: float = 6.0) -> dict:
    return {"switch_ms": switch_ms, "switch_ms_all": [switch_ms, switch_ms * 1.01], "handoff_ms": 300.0,
            "recovered_ms": switch_ms + steady, "steady_pass_ms": steady, "evict_ms": 210.0, "drain_ms": 3.0,
            "prefetch_ms": switch_ms * 0.9, "evict_flags": ["yes", "yes"], "regrant_prefetch": ["yes", "yes"],
            "cycles": [{"switch_ms": switch_ms, "window": [[-20.0, -14.0], [-14.0, switch_ms],
                                                           [switch_ms, switch_ms + steady]]}],
            "passes": 500, "data_ok": True}


SAMPLE = {
    "machine": {"gpu": "NVIDIA H100 80GB HBM3, 580.1, 81559 MiB", "torch": "2.11.0", "torch_cuda": "13.0",
                "python": "3.12.3", "nvcc": "Build cuda_13.0", "commit": "abc1234", "date": "2026-11-23 10:00 UTC"},
    "library": "/x/libnvshare.so", "rerun": "python3 -m bench.run_all", "quick": False, "budget_s": 470,
    "seconds": 455.0,
    "train_overhead": {"reps": 2, "warmup_steps": 20, "configs": {"large": {
        "args": ["--width", "256"], "native_ms": 18.7, "library_ms": 18.8, "ratio": 1.004, "ratio_min": 1.001,
        "ratio_max": 1.006, "pair_ratios": [1.001, 1.006]}}, "seconds": 50.0},
    "launch_overhead": {"paired": {"batch": 1000, "rounds_per_run": 100, "runs": 2, "functions": {
        "cuLaunchKernel": {"submit": {
            "library": {"delta_ns": 61.4, "delta_q1": -20.0, "delta_q3": 135.0, "per_run_delta_ns": [65.2, 58.1],
                        "wrapper_ns": 4079.5, "real_ns": 3995.6},
            "control": {"delta_ns": 2.5, "delta_q1": -80.0, "delta_q3": 116.0, "per_run_delta_ns": [2.5]}}}}}},
    "sched_latency": {
        "parameters": {"cycles": 5000, "handoffs": 3000, "frame_bytes": {"request": 56, "reply": 28, "trailing": 36}},
        "uncontended": {"round_trip_us": _lat(140.0, 250.0), "cycle_us": _lat(157.0, 260.0)},
        "contended": {"grant_us": _lat(210.0, 420.0)},
        "baseline": {"round_trip_us": _lat(40.0, 75.0), "cycle_us": _lat(42.0, 80.0), "grant_us": _lat(56.0, 81.0)},
        "ratios": {"round_trip": {"p50": 3.5, "p99": 3.33}, "cycle": {"p50": 3.74, "p99": 3.25},
                   "grant": {"p50": 3.75, "p99": 5.19}},
        "rerun": "python3 -m bench.scheduling.sched_latency"},
    "switch_cost": {
        "parameters": {"sizes_gib": [1.0, 8.0], "cycles": 3, "tq_s": 60.0, "capacity_gib": 14.0, "reserve_mib": 512},
        "variants": {"wait": {"sizes": {"1": _switch_size(25.0), "8": _switch_size(180.0)}},
                     "overlap": {"sizes": {"1": _switch_size(30.0), "8": _switch_size(170.0)}},
                     "off": {"sizes": {"1": _switch_size(230.0), "8": _switch_size(1800.0)}}},
        "reference": {"gib": 8, "h2d_ms_per_gib": 20.0, "d2h_ms_per_gib": 21.0},
        "headline": {"1": {"wait_ms": 25.0, "overlap_ms": 30.0, "off_ms": 230.0, "demand_vs_wait": 9.2,
                           "demand_vs_overlap": 7.67, "faster_bulk": "wait", "demand_vs_bulk": 9.2,
                           "copy_ms": 20.0, "bulk_vs_copy": 1.25, "goal_met": True},
                     "8": {"wait_ms": 180.0, "overlap_ms": 170.0, "off_ms": 1800.0, "demand_vs_wait": 10.0,
                           "demand_vs_overlap": 10.59, "faster_bulk": "overlap", "demand_vs_bulk": 10.59,
                           "copy_ms": 160.0, "bulk_vs_copy": 1.0625, "goal_met": True}}},
    "makespan_fit": {"jobs": {2: {"auto": 9.1, "concurrent": 9.0, "sequential": 16.0, "auto_vs_concurrent": 1.011,
                                  "auto_vs_sequential": 0.569},
                              4: {"auto": 18.9, "concurrent": 18.0, "sequential": 32.0, "auto_vs_concurrent": 1.05,
                                  "auto_vs_sequential": 0.59}}},
    "makespan_pair": {"tq": {5: {"fast": 28.0, "demand": 40.0, "sequential": 26.0, "fast_vs_sequential": 1.077,
                                 "demand_vs_sequential": 1.538, "switches": 5},
                             30: {"fast": 26.5, "demand": 26.6, "sequential": 26.0, "fast_vs_sequential": 1.019,
                                  "demand_vs_sequential": 1.023, "switches": 0}}},
    "interactive": {"wait_ms": {"p50": 150.0, "p99": 290.0}, "switch_ms": 210.0, "batch_slowdown": 1.08,
                    "steps": 12},
}


def sample() -> dict:
    return copy.deepcopy(SAMPLE)
