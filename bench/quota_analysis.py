"""The pure parts of bench/quota_limits.py: the verdicts on limits and shares, and the analysis of a
live limit change from a workload's trace.

A trace is a list of [t, n]: n products completed by t seconds after the workload's start event, on
the GPU's clock (CUDA events), starting at [0, 0]. The GPU's clock is the one that tells: the library
gates work at launch, so the host enqueues in bursts and its own timestamps say little of when the
products ran. Products between two trace points are taken as evenly spread (linear interpolation).
"""

from __future__ import annotations

GOAL_POINTS = 3.0         # a limit or a share is met within this many points
GOAL_COMBINED = 0.95      # combined throughput with shares over without
GOAL_EFFECT_S = 1.0       # a lowered limit holds within this many seconds of the change
EFFECT_WINDOW_S = 0.5     # effect_s: windows this long ...
EFFECT_STEP_S = 0.1       # ... stepped by this much


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
    return {"before": window_percent(trace, change - 1.0, change, solo_ips),
            "first_s": window_percent(trace, change, change + 1.0, solo_ips),
            "second_s": window_percent(trace, change + 1.0, change + 2.0, solo_ips)}


def effect_s(trace: list, change: float, solo_ips: float | None, target: float) -> float | None:
    """The earliest time after the change (on a EFFECT_STEP_S grid) from which every EFFECT_WINDOW_S
    window, stepped by EFFECT_STEP_S, to the end of the trace is at most target + GOAL_POINTS percent
    of solo. None when no window after the change fits in the trace, or the last ones are above."""
    if not trace or not solo_ips:
        return None
    starts = []
    k = 0
    while change + k * EFFECT_STEP_S + EFFECT_WINDOW_S <= trace[-1][0] + 1e-9:
        starts.append(k)
        k += 1
    found = None
    for k in reversed(starts):  # walk back from the end while the windows hold
        t = change + k * EFFECT_STEP_S
        pct = window_percent(trace, t, min(t + EFFECT_WINDOW_S, trace[-1][0]), solo_ips)
        if pct is None or pct > target + GOAL_POINTS:
            break
        found = k * EFFECT_STEP_S
    return None if found is None else round(found, 6)


def judge_live(trace: list | None, change: float | None, solo_ips: float | None,
               to_pct: float) -> dict:
    """The verdict on a limit lowered to to_pct while running: the windows around the change,
    effect_s (goal <= GOAL_EFFECT_S) and the second second after it (goal to_pct +/- GOAL_POINTS)."""
    out = {"windows": {"before": None, "first_s": None, "second_s": None}, "effect_s": None,
           "effect_met": None, "settled_met": None}
    if not trace or change is None or not solo_ips:
        return out
    out["windows"] = change_windows(trace, change, solo_ips)
    out["effect_s"] = effect_s(trace, change, solo_ips, to_pct)
    out["effect_met"] = out["effect_s"] is not None and out["effect_s"] <= GOAL_EFFECT_S
    second = out["windows"]["second_s"]
    out["settled_met"] = second is not None and abs(second - to_pct) <= GOAL_POINTS
    return out


def all_met(result: dict) -> bool:
    """Every goal of a result met (the graph and live parts count when the result has them)."""
    limits = result.get("limits") or {}
    shares = (result.get("shares") or {}).get("verdict") or {}
    flags = [row.get("met") for k, row in limits.items() if k != "none"]
    flags += list(shares.get("met") or [None]) + [shares.get("combined_met")]
    if "graph" in result:
        flags.append(((result.get("graph") or {}).get("limited") or {}).get("met"))
    if "live" in result:
        verdict = (result.get("live") or {}).get("verdict") or {}
        flags += [verdict.get("effect_met"), verdict.get("settled_met")]
    return bool(flags) and all(x is True for x in flags)
