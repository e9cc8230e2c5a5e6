"""The pure parts of bench/quotas/quota_limits.py: the verdicts on limits and shares, and the analysis of a
live limit change from a workload's trace.

A trace is a list of [t, n]: n products completed by t seconds after the workload's start event, on
the GPU's clock (CUDA events), starting at [0, 0]. The GPU's clock is the one that tells: the library
gates work at launch, so the host enqueues in bursts and its own timestamps say little of when the
products ran. Products between two trace points are taken as evenly spread (linear interpolation).
"""

from __future__ import annotations

GOAL_POINTS = 3.0         # a limit or a share is met within this many points
GOAL_COMBINED = 0.95      # combined throughput with shares over without
WINDOW_S = 1.0            # a live change is judged on the achieved share over 1 s windows ...
WINDOW_STEP_S = 0.1       # ... stepped by this much from the change to the end of the trace
BURST_WINDOW_S = 0.25     # the spread of these windows once settled says how even the work is


def judge_limit(solo_ips: float | None, ips: float | None, limit_pct: float) -> dict:
    """The fraction of the solo throughput a limited run got, in percent, and whether it is within
    GOAL_POINTS of the limit (None when it cannot be told)."""
    if not solo_ips or ips is None:
        return {"percent": None, "met": None}
    pct = 100.0 * ips / solo_ips
    return {"percent": pct, "met": abs(pct - limit_pct) <= GOAL_POINTS}


def judge_shares(without: list[float | None], with_shares: list[float | None],
                 shares: list[float]) -> dict:
    """Each workload's percent of the pair's combined throughput with shares (goal: its share of
    the shares' sum, within GOAL_POINTS), and combined with shares over combined without."""
    out = {"percent": [None] * len(shares), "expected": [100.0 * s / sum(shares) for s in shares],
           "met": [None] * len(shares), "combined_ratio": None, "combined_met": None}
    if any(x is None for x in with_shares):
        return out
    total = sum(with_shares)
    if total > 0:
        out["percent"] = [100.0 * x / total for x in with_shares]
        out["met"] = [abs(p - e) <= GOAL_POINTS for p, e in zip(out["percent"], out["expected"])]
    if all(x is not None for x in without) and sum(without) > 0:
        out["combined_ratio"] = total / sum(without)
        out["combined_met"] = out["combined_ratio"] >= GOAL_COMBINED
    return out


# ----------------------------------------------------------------------------- a live change

def products_at(trace: list, t: float) -> float | None:
    """Products completed by time t (interpolated), None outside the trace."""
    if not trace or t < trace[0][0] or t > trace[-1][0]:
        return None
    lo, hi = 0, len(trace) - 1
    while hi - lo > 1:  # the last point at or before t
        mid = (lo + hi) // 2
        if trace[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, n0), (t1, n1) = trace[lo], trace[hi]
    if t1 <= t0 or t <= t0:
        return float(n0) if t <= t0 else float(n1)
    return n0 + (n1 - n0) * (t - t0) / (t1 - t0)


def window_percent(trace: list, t_from: float, t_to: float, solo_ips: float | None) -> float | None:
    """Throughput over [t_from, t_to] as a percent of solo_ips; None when the trace does not cover it."""
    a, b = products_at(trace, t_from), products_at(trace, t_to)
    if a is None or b is None or not solo_ips or t_to <= t_from:
        return None
    return 100.0 * (b - a) / (t_to - t_from) / solo_ips


def change_windows(trace: list, change: float, solo_ips: float | None) -> dict:
    """Percent of solo over the second before the change, the second after it and the one after that."""
    return {"before": window_percent(trace, change - WINDOW_S, change, solo_ips),
            "first_s": window_percent(trace, change, change + WINDOW_S, solo_ips),
            "second_s": window_percent(trace, change + WINDOW_S, change + 2 * WINDOW_S, solo_ips)}


def window_range(trace: list, t_from: float, width: float, solo_ips: float | None) -> list | None:
    """[lowest, highest] percent of solo over the windows of `width` that start at t_from, t_from +
    WINDOW_STEP_S, ... and end within the trace; None when none fits."""
    if not trace or not solo_ips:
        return None
    values, k = [], 0
    while t_from + k * WINDOW_STEP_S + width <= trace[-1][0] + 1e-9:
        t = t_from + k * WINDOW_STEP_S
        values.append(window_percent(trace, t, min(t + width, trace[-1][0]), solo_ips))
        k += 1
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def judge_live(trace: list | None, change: float | None, solo_ips: float | None,
               to_pct: float) -> dict:
    """The verdict on a limit lowered to to_pct while running. effect_met: the share achieved over
    the WINDOW_S right after the change is to_pct +/- GOAL_POINTS (it took effect within that
    second). held: the range of every WINDOW_S window from the change to the end of the trace,
    held_met when all are within the points. spread: the range of BURST_WINDOW_S windows from a
    second after the change (how evenly the limited work runs; no goal)."""
    out = {"windows": {"before": None, "first_s": None, "second_s": None}, "effect_met": None,
           "held": None, "held_met": None, "spread": None}
    if not trace or change is None or not solo_ips:
        return out
    out["windows"] = change_windows(trace, change, solo_ips)
    first = out["windows"]["first_s"]
    out["effect_met"] = first is not None and abs(first - to_pct) <= GOAL_POINTS
    out["held"] = window_range(trace, change, WINDOW_S, solo_ips)
    out["held_met"] = out["held"] is not None and all(
        abs(v - to_pct) <= GOAL_POINTS for v in out["held"])
    out["spread"] = window_range(trace, change + WINDOW_S, BURST_WINDOW_S, solo_ips)
    return out


def judge_gpu_time(clocks: dict | None, limit_pct: float) -> dict:
    """The GPU's own utilisation over a limited run (NVML, sampled by nvidia-smi: the share of time
    a kernel ran), and whether it is within GOAL_POINTS of the limit: the GPU time the limit bounds,
    measured outside the library. None without samples."""
    util = (clocks or {}).get("util_pct")
    if util is None:
        return {"util_pct": None, "met": None}
    return {"util_pct": util, "met": abs(util - limit_pct) <= GOAL_POINTS}


def all_met(result: dict) -> bool:
    """Every goal of a result met (the graph, live and memory-bound parts count when the result has
    them)."""
    limits = result.get("limits") or {}
    shares = (result.get("shares") or {}).get("verdict") or {}
    # a limit row's "met" is its goal's verdict (throughput or GPU time: quota_limits._limit_rows)
    flags = [row.get("met") for rows in (limits, result.get("memory_bound") or {})
             for key, row in rows.items() if key != "none"]
    flags += list(shares.get("met") or [None]) + [shares.get("combined_met")]
    if "graph" in result:
        flags.append(((result.get("graph") or {}).get("limited") or {}).get("met"))
    if "live" in result:
        verdict = (result.get("live") or {}).get("verdict") or {}
        flags += [verdict.get("effect_met"), verdict.get("held_met")]
    return bool(flags) and all(x is True for x in flags)
