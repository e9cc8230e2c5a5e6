"""The figures of bench/scheduling/inference_beside_training.py's arms (pure): request latency
percentiles and their ratio to the server alone, the training's rate over the arm and over the
server's idle gaps against the training alone, whether every answer matched, and the table printed
per configuration."""

from __future__ import annotations

import bisect

from bench.core import stats

GOAL_P99 = 1.1  # issue 32: p99 at most 1.1x alone
GOAL_TRAIN = 0.9  # and the training at least 0.9x alone during the server's idle gaps


def latency_summary(latency_s: list[float]) -> dict:
    ms = [v * 1e3 for v in latency_s]
    return {"p50": stats.percentile(ms, 50), "p99": stats.percentile(ms, 99),
            "p99.9": stats.percentile(ms, 99.9), "n": len(ms)}


def rate(step_ends: list[float], start: float, end: float) -> float | None:
    n = sum(1 for t in step_ends if start <= t <= end)
    return n / (end - start) if end > start else None


def gap_rate(step_ends: list[float], gaps: list) -> float | None:
    """Steps that ended within the server's idle gaps, per second of gap."""
    total = sum(b - a for a, b in gaps)
    if total <= 0:
        return None
    ends = sorted(step_ends)
    n = sum(bisect.bisect_right(ends, b) - bisect.bisect_left(ends, a) for a, b in gaps)
    return n / total


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Per arm (runs: arm -> its repetitions' outputs): latencies pooled over the repetitions,
    ratios to the alone arms, and whether every answer matched server_alone's."""
    reference = next((r["server"]["hashes"] for r in runs.get("server_alone", [])), None)
    alone_lat = [v for r in runs.get("server_alone", []) for v in r["server"]["latency_s"]]
    alone_p99 = latency_summary(alone_lat)["p99"] if alone_lat else None
    alone_rates = [rate(r["trainer"]["step_ends"], r["trainer"]["start"], max(r["trainer"]["step_ends"]))
                   for r in runs.get("training_alone", []) if r["trainer"]["step_ends"]]
    alone_rate = stats.median(alone_rates)
    out = {}
    for arm, reps in runs.items():
        row: dict = {"reps": len(reps)}
        if all("server" in r for r in reps):
            lat = latency_summary([v for r in reps for v in r["server"]["latency_s"]])
            row["latency_ms"] = lat
            row["submit_ms"] = latency_summary([v for r in reps for v in r["server"].get("submit_s", [])])
            row["service_ms"] = latency_summary([v for r in reps for v in r["server"].get("service_s", [])])
            cpu = [c for r in reps for c in r["server"].get("launch_cpu_s", [])]
            row["launch_cpu_share"] = stats.ratio(sum(c for c, _ in cpu), sum(w for _, w in cpu))
            row["p99_vs_alone"] = stats.ratio(lat["p99"], alone_p99)
            row["identical"] = reference is not None and all(r["server"]["hashes"] == reference
                                                             for r in reps)
        if all("trainer" in r for r in reps):
            overall = stats.median(rate(r["trainer"]["step_ends"], r["trainer"]["start"],
                                        r["server"]["end"] if "server" in r else
                                        max(r["trainer"]["step_ends"] or [r["trainer"]["start"]]))
                                   for r in reps)
            gaps = stats.median(gap_rate(r["trainer"]["step_ends"], r["server"]["gaps"])
                                for r in reps if "server" in r)
            row["train_steps_per_s"] = overall
            row["train_vs_alone"] = stats.ratio(overall, alone_rate)
            row["train_in_gaps_vs_alone"] = stats.ratio(gaps, alone_rate)
        if arm not in ("server_alone", "training_alone") and row.get("p99_vs_alone") is not None:
            row["met"] = (row["p99_vs_alone"] <= GOAL_P99 and row.get("identical", False)
                          and (row.get("train_in_gaps_vs_alone") or 0) >= GOAL_TRAIN)
        out[arm] = row
    return out


def table(config: dict, arms: dict) -> str:
    def f(v, spec=".2f"):
        return "-" if v is None else format(v, spec)
    width = max([len(a) for a in arms] + [3]) + 1
    lines = [f"layers {config['layers']}, one request every {config['mean_ms']:g} ms (mean)",
             f"{'arm':<{width}} p50 ms  p99 ms  p99.9 ms  p99/alone  train/alone  gaps/alone  identical"
             f"  service p50/p99  launch cpu"]
    for arm, r in arms.items():
        lat, svc = r.get("latency_ms", {}), r.get("service_ms", {})
        lines.append(f"{arm:<{width}} {f(lat.get('p50')):>7} {f(lat.get('p99')):>7} {f(lat.get('p99.9')):>9}"
                     f" {f(r.get('p99_vs_alone'), '.3f'):>10} {f(r.get('train_vs_alone'), '.3f'):>12}"
                     f" {f(r.get('train_in_gaps_vs_alone'), '.3f'):>11} {str(r.get('identical', '-')):>10}"
                     f" {f(svc.get('p50')):>8}/{f(svc.get('p99')):<7} {f(r.get('launch_cpu_share')):>10}")
    return "\n".join(lines)
