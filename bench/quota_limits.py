#!/usr/bin/env python3
"""Quotas: compute limits and compute shares on a real GPU, as throughput ratios.

(a) limits: one saturating workload (bench/quota_workload.py: back-to-back 4096 x 4096 matrix
    products in 16 bits) under libnvshare.so and a scheduler, alone: with no limit (solo), then
    with NVSHARE_COMPUTE_LIMIT=25, 50 and 75. Its throughput over the solo throughput is the
    fraction it got; the goal is L +/- 3 points.
(b) shares: two such workloads started together under one scheduler in mode auto (both fit in
    memory): without shares, then with NVSHARE_COMPUTE_SHARE=30 and =70. Each one's fraction of the
    pair's combined throughput (goal 30 +/- 3 and 70 +/- 3), and the combined throughput with shares
    over the combined throughput without (goal >= 0.95).

    python3 bench/quota_limits.py [--quick] [--seconds 8] [--tq 2] [--json out.json]

--tq is the scheduler's quantum (default 2 s; a shorter one makes turns finer). The whole run takes
about 2 minutes (--quick: about 1). The workloads need PyTorch: the first of $BUSY_PYTHON, this
Python, python3, /opt/torch/.venv/bin/python3 that imports torch runs them. GPU safety: each process
holds about 100 MiB and is capped at 1 GiB (NVSHARE_GPU_MEMORY_LIMIT).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from busy_accuracy import torch_python  # noqa: E402
from render import error_of, error_row, f, goal_row, num, yes_no  # noqa: E402

NAME = "quota_limits"
TITLE = "Quotas: compute limits and compute shares (throughput of saturating workloads)"
SHARE, MIN_S, GPU = 150, 70, True
DEFAULT = False  # run it with --only quota_limits, or alone
RERUN = "python3 bench/quota_limits.py"
LIMITS = (25, 50, 75)
SHARES = (30, 70)
GOAL_POINTS = 3.0         # a limit or a share is met within this many points
GOAL_COMBINED = 0.95      # combined throughput with shares over without
MEMORY_LIMIT = "1GiB"     # per process
WORKLOAD = BENCH / "quota_workload.py"


# ----------------------------------------------------------------------------- pure parts

def plan(quick: bool, seconds: float | None, tq: float | None) -> dict:
    return {"seconds": seconds if seconds else (3.0 if quick else 8.0),
            "tq": tq if tq else 2.0, "limits": list(LIMITS), "shares": list(SHARES)}


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


def all_met(result: dict) -> bool:
    limits = result.get("limits") or {}
    shares = (result.get("shares") or {}).get("verdict") or {}
    flags = [row.get("met") for k, row in limits.items() if k != "none"]
    flags += list(shares.get("met") or [None]) + [shares.get("combined_met")]
    return bool(flags) and all(x is True for x in flags)


# ----------------------------------------------------------------------------- the measurement

def _wait_file(path: Path, proc, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before {path.name}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not write {path.name} within {timeout:.0f}s")
        time.sleep(0.02)


def run_group(envs: list[dict], python: str, seconds: float, tmp: Path, tag: str,
              script: Path = WORKLOAD) -> list[dict]:
    """Start one workload per environment, let them go together, return their results."""
    import subprocess

    procs = []
    go = tmp / f"{tag}.go"
    try:
        for i, env in enumerate(envs):
            files = {k: tmp / f"{tag}.{i}.{k}" for k in ("warm", "ready")}
            argv = [python, str(script), "--seconds", str(seconds), "--go", str(go),
                    "--warm", str(files["warm"]), "--ready", str(files["ready"])]
            procs.append((subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True), files))
        for i, (p, files) in enumerate(procs):
            _wait_file(files["warm"], p, 180, f"workload {tag}.{i}")
        go.touch()
        out = []
        for i, (p, files) in enumerate(procs):
            _wait_file(files["ready"], p, 60 + 20 * seconds, f"workload {tag}.{i}")
            out.append(json.loads(files["ready"].read_text()))
        return out
    finally:
        for p, _ in procs:
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def measure(quick: bool = False, seconds: float | None = None, tq: float | None = None) -> dict:
    from common import harness, require_safe_gpu

    require_safe_gpu()
    p = plan(quick, seconds, tq)
    python = torch_python()
    lib = harness.library_path()
    limits: dict = {}
    shares: dict = {}
    with harness.Scheduler(mode="auto", tq=p["tq"]) as sched:
        tmp = sched.workdir

        def env(**extra):
            return harness.library_env(lib, sched.socket, NVSHARE_GPU_MEMORY_LIMIT=MEMORY_LIMIT,
                                       **extra)
        (solo,) = run_group([env()], python, p["seconds"], tmp, "solo")
        limits["none"] = {"ips": solo["ips"], "iterations": solo["iterations"],
                          "wall_s": solo["wall_s"]}
        for lim in p["limits"]:
            (r,) = run_group([env(NVSHARE_COMPUTE_LIMIT=lim)], python, p["seconds"], tmp,
                             f"limit{lim}")
            limits[str(lim)] = {"ips": r["ips"], "iterations": r["iterations"],
                                "wall_s": r["wall_s"], **judge_limit(solo["ips"], r["ips"], lim)}
        pair = run_group([env(), env()], python, p["seconds"], tmp, "pair")
        shared = run_group([env(NVSHARE_COMPUTE_SHARE=s) for s in p["shares"]], python,
                           p["seconds"], tmp, "shares")
        shares = {"without": [r["ips"] for r in pair], "with": [r["ips"] for r in shared],
                  "verdict": judge_shares([r["ips"] for r in pair], [r["ips"] for r in shared],
                                          p["shares"])}
    return {"parameters": {**p, "python": python, "scheduler_mode": "auto",
                           "memory_limit": MEMORY_LIMIT, "goal_points": GOAL_POINTS,
                           "goal_combined": GOAL_COMBINED},
            "limits": limits, "shares": shares}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    quick = quick or (time_left is not None and time_left < 130)
    result = measure(quick=quick)
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("compute limits and shares", error_of(section))]
    rows = []
    solo = (section.get("limits") or {}).get("none") or {}
    for key, row in (section.get("limits") or {}).items():
        if key == "none":
            continue
        rows.append(goal_row(f"compute limit {key}%", f"{f(row.get('ips'), 1)} products/s",
                             f"{f(solo.get('ips'), 1)} products/s (no limit)",
                             f"**{f(num(row.get('percent')), 1)}%**",
                             f"{key} ± {GOAL_POINTS:g} points", row.get("met")))
    sh = section.get("shares") or {}
    v = sh.get("verdict") or {}
    params = section.get("parameters") or {}
    for i, share in enumerate(params.get("shares") or SHARES):
        pct = (v.get("percent") or [None] * 2)[i]
        exp = (v.get("expected") or [None] * 2)[i]
        met = (v.get("met") or [None] * 2)[i]
        rows.append(goal_row(f"compute share {share} (of {'+'.join(map(str, params.get('shares') or SHARES))})",
                             f"{f((sh.get('with') or [None] * 2)[i], 1)} products/s",
                             "the pair's combined throughput", f"**{f(num(pct), 1)}%**",
                             f"{f(exp, 0)} ± {GOAL_POINTS:g} points", met))
    rows.append(goal_row("combined throughput with shares", f"{f(sum(sh.get('with') or [0]), 1)} products/s"
                         if all(x is not None for x in sh.get("with") or [None]) else "—",
                         "the same pair without shares", f"**{f(num(v.get('combined_ratio')), 3)}x**",
                         f">= {GOAL_COMBINED}x", v.get("combined_met")))
    return rows


def section(s: dict) -> str:
    params = s.get("parameters") or {}
    lines = ["| run | products/s | **percent of solo** | goal | met |", "|---|---:|---:|---|---|"]
    for key, row in (s.get("limits") or {}).items():
        if key == "none":
            lines.append(f"| alone, no limit | {f(row.get('ips'), 1)} | 100 | — | — |")
        else:
            lines.append(f"| alone, NVSHARE_COMPUTE_LIMIT={key} | {f(row.get('ips'), 1)} | "
                         f"**{f(num(row.get('percent')), 1)}** | {key} ± {GOAL_POINTS:g} | "
                         f"{yes_no(row.get('met'))} |")
    sh = s.get("shares") or {}
    v = sh.get("verdict") or {}
    shares = params.get("shares") or list(SHARES)
    lines += ["", "| pair (mode auto) | products/s each | combined | **percent of combined** | goal | met |",
              "|---|---:|---:|---:|---|---|"]
    without = sh.get("without") or []
    if without and all(x is not None for x in without):
        tot = sum(without)
        lines.append(f"| no shares | {' / '.join(f(x, 1) for x in without)} | {f(tot, 1)} | "
                     f"{' / '.join(f(100 * x / tot, 1) for x in without)} | — | — |")
    with_ = sh.get("with") or []
    if with_ and all(x is not None for x in with_):
        lines.append(f"| NVSHARE_COMPUTE_SHARE={' / '.join(map(str, shares))} | "
                     f"{' / '.join(f(x, 1) for x in with_)} | {f(sum(with_), 1)} | "
                     f"**{' / '.join(f(num(x), 1) for x in (v.get('percent') or []))}** | "
                     f"{' / '.join(f(x, 0) for x in (v.get('expected') or []))} ± {GOAL_POINTS:g} | "
                     f"{' / '.join(yes_no(m) for m in (v.get('met') or []))} |")
    lines.append(f"\nCombined throughput with shares over without: **{f(num(v.get('combined_ratio')), 3)}x** "
                 f"(goal >= {GOAL_COMBINED}; {yes_no(v.get('combined_met'))}).")
    return "\n".join(lines) + (
        f"\n\nEach workload (bench/quota_workload.py) issues back-to-back {params.get('seconds', '?')} s of "
        "4096 x 4096 16-bit matrix products and counts them from one synchronisation to the next. "
        "Limits: one process alone under a scheduler; its throughput over the same workload's with no "
        "limit (solo, measured in the same run). Shares: two processes started together under one "
        f"scheduler in mode auto (tq {params.get('tq', '?')} s); each one's part of their combined "
        "throughput.\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 s per run (default 8)")
    p.add_argument("--seconds", type=float, help="seconds of measured work per run")
    p.add_argument("--tq", type=float, help="the scheduler's quantum in seconds (default 2)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.seconds is not None and not 1 <= args.seconds <= 30:
        p.error("--seconds must be from 1 to 30")
    if args.tq is not None and not 0.05 <= args.tq <= 60:
        p.error("--tq must be from 0.05 to 60")
    t0 = time.monotonic()
    result = measure(args.quick, args.seconds, args.tq)
    result["seconds"] = time.monotonic() - t0
    result["rerun"] = RERUN + (" --quick" if args.quick else "")
    print(section(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all_met(result) else 1


if __name__ == "__main__":
    sys.exit(main())
