#!/usr/bin/env python3
"""Quotas: compute limits and compute shares on a real GPU, as throughput ratios.

Two workloads (bench/quotas/quota_workload.py), each alone or in pairs under libnvshare.so and a scheduler:
back-to-back 4096 x 4096 matrix products in 16 bits, bound by arithmetic, and element-wise sums of
two 64 Mi-element 16-bit vectors (--op add), bound by memory bandwidth. Products hold an H100 at its
power cap when alone; under a limit the GPU is busy part of the time, below its cap, and runs them
at a higher clock, so they get a little more than L of their solo throughput for L of the GPU's time.
Sums run at the same clock whatever the limit, so their throughput is the GPU time they got.

(a) limits: each workload alone with no limit (solo), then with NVSHARE_COMPUTE_LIMIT=25, 50 and
    75: its throughput over the solo one, and the GPU's own utilisation (NVML, the share of time a
    kernel ran). Goal L +/- 3 points: of throughput for the sums, of GPU time for the products.
(b) shares: two product workloads started together under one scheduler in mode auto (both fit in
    memory): without shares, then with NVSHARE_COMPUTE_SHARE=30 and =70. Each one's fraction of the
    pair's combined throughput (goal 30 +/- 3 and 70 +/- 3), and the combined throughput with shares
    over the combined throughput without (goal >= 0.95). Both pairs keep the GPU saturated.
(c) CUDA graphs: the sums, 8 to a captured graph that the workload replays (--graph), alone with no
    limit and with NVSHARE_COMPUTE_LIMIT=30: goal 30 +/- 3 points of the graph's own solo
    throughput (a graph launch is bound like the launches it holds).
(d) a live change: a sum workload started with NVSHARE_COMPUTE_LIMIT=75 that records a CUDA event
    every 16 sums; CHANGE_AT (3 s) after its start the limit is lowered to 25 through the
    scheduler's control operation (as `nvsharectl --set-compute-limit 25 --pid PID`). From its
    trace: percent of solo over the second before the change and the two after it. Goals: 25 +/- 3
    over the second right after the change (it took effect within 1 s), and over every 1 s window
    (stepped by 0.1 s) from the change to the end; the spread of 0.25 s windows is shown too.
Every run records the GPU's mean SM clock, power draw and utilisation while it is measured
(nvidia-smi every 50 ms, bench/core/gpu_clocks.py; blank without nvidia-smi).

    python3 -m bench.quotas.quota_limits [--quick] [--seconds 8] [--tq 2] [--json out.json]

--tq is the scheduler's quantum (default 2 s; a shorter one makes turns finer). Thirteen runs of
--seconds each (the live one at least CHANGE_AT + 4 s), each after a start-up of PyTorch of some
seconds: the whole run takes about 4 minutes (--quick: 3 s runs, about 3). The workloads need
PyTorch: the first of $BUSY_PYTHON, this Python, python3, /opt/torch/.venv/bin/python3 that imports
torch runs them. GPU
safety: each process holds at most about 400 MiB and is capped at 1 GiB (NVSHARE_GPU_MEMORY_LIMIT).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.common import torch_python  # noqa: E402
from bench.core.gpu_clocks import ClockSampler, smi_argv  # noqa: E402
from bench.quotas.quota_analysis import (GOAL_COMBINED, GOAL_POINTS, all_met, judge_gpu_time,  # noqa: E402,F401
                            judge_limit, judge_live, judge_shares)
from bench.quotas.quota_report import goals, section  # noqa: E402,F401  (the suite's interface)
from bench.core.render import finish  # noqa: E402

NAME = "quota_limits"
TITLE = "Quotas: compute limits and compute shares (throughput of saturating workloads)"
SHARE, MIN_S, GPU = 200, 100, True
DEFAULT = False  # run it with --only quota_limits, or alone
RERUN = "python3 -m bench.quotas.quota_limits"
LIMITS = (25, 50, 75)
SHARES = (30, 70)
GRAPH_LIMIT = 30
LIVE_FROM, LIVE_TO = 75, 25
CHANGE_AT = 3.0           # seconds after the live workload's go file when its limit is lowered
AFTER_CHANGE = 4.0        # seconds of trace the live run keeps after the change, at least
TRACE_EVERY = 16          # operations between two of the live workload's CUDA events
CLOCK_SKIP = (0.5, 0.2)   # clock samples count from go + 0.5 s to ready - 0.2 s (no start, no end)
MEMORY_LIMIT = "1GiB"     # per process
WORKLOAD = BENCH / "quotas" / "quota_workload.py"
MEMORY_BOUND_ARGS = ("--op", "add")  # vector sums: bound by memory bandwidth, below the power cap


def plan(quick: bool, seconds: float | None, tq: float | None) -> dict:
    seconds = seconds if seconds else (3.0 if quick else 8.0)
    return {"seconds": seconds, "tq": tq if tq else 2.0, "limits": list(LIMITS),
            "shares": list(SHARES), "graph_limit": GRAPH_LIMIT, "graph_live_op": "add",
            "live": {"from": LIVE_FROM, "to": LIVE_TO, "change_at": CHANGE_AT,
                     "seconds": max(seconds, CHANGE_AT + AFTER_CHANGE), "trace_every": TRACE_EVERY}}


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
              script: Path = WORKLOAD, extra: tuple[str, ...] = (), during=None,
              sampler: ClockSampler | None = None) -> dict:
    """Start one workload per environment, let them go together, return {"results" (theirs),
    "t_go", "t_ready" (time.monotonic()), "during" (what during(pids, t_go) returned, called right
    after the go), "clocks" (the sampler's means over the measured phase, less its edges)}."""
    import subprocess

    procs = []
    go = tmp / f"{tag}.go"
    try:
        for i, env in enumerate(envs):
            files = {k: tmp / f"{tag}.{i}.{k}" for k in ("warm", "ready")}
            argv = [python, str(script), "--seconds", str(seconds), "--go", str(go),
                    "--warm", str(files["warm"]), "--ready", str(files["ready"]), *extra]
            procs.append((subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True), files))
        for i, (p, files) in enumerate(procs):
            _wait_file(files["warm"], p, 180, f"workload {tag}.{i}")
        go.touch()
        t_go = time.monotonic()
        done = during([p.pid for p, _ in procs], t_go) if during else None
        out = []
        for i, (p, files) in enumerate(procs):
            _wait_file(files["ready"], p, 60 + 20 * seconds, f"workload {tag}.{i}")
            out.append(json.loads(files["ready"].read_text()))
        t_ready = time.monotonic()
        clocks = (sampler or ClockSampler(None)).window(t_go + CLOCK_SKIP[0], t_ready - CLOCK_SKIP[1])
        return {"results": out, "t_go": t_go, "t_ready": t_ready, "during": done, "clocks": clocks}
    finally:
        for p, _ in procs:
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def _row(group: dict) -> dict:
    (r,) = group["results"]
    return {"ips": r["ips"], "iterations": r["iterations"], "wall_s": r["wall_s"],
            "clocks": group["clocks"]}


def _live(p: dict, run, set_limit, solo_ips: float | None, args: tuple = ()) -> dict:
    """(d): the limit lowered from live.from to live.to change_at seconds after the go; solo_ips:
    the workload's (args') throughput with no limit."""
    lv = p["live"]

    def change(pids, t_go):
        time.sleep(max(0.0, t_go + lv["change_at"] - time.monotonic()))
        t_request = time.monotonic()
        reply = set_limit(pids[0], lv["to"])
        return {"t_request": t_request, "t_reply": time.monotonic(), "reply": reply}
    g = run([{"NVSHARE_COMPUTE_LIMIT": lv["from"]}], "live", lv["seconds"],
            (*args, "--trace-every", str(lv["trace_every"])), change)
    (r,) = g["results"]
    done = g["during"]
    reply = done["reply"] or {}
    if not reply.get("ok") or reply.get("clients") == 0:  # nothing changed: nothing to measure
        raise RuntimeError(f"set_compute_limit was refused: {done['reply']}")
    # The workload's t0 is on the same monotonic clock; its trace counts from its start event,
    # recorded right after t0 on an idle GPU.
    change_s = done["t_reply"] - r["start"]
    return {"ips": r["ips"], "iterations": r["iterations"], "wall_s": r["wall_s"],
            "clocks": g["clocks"], "change_s": change_s,
            "reply_s": done["t_reply"] - done["t_request"], "trace": r["trace"],
            "verdict": judge_live(r["trace"], change_s, solo_ips, lv["to"])}


def _limit_rows(run, limits, args: tuple, tag: str, goal: str) -> dict:
    """One workload alone with no limit ("none"), then with each limit: its throughput over the
    solo one (percent, throughput_met) and the GPU's utilisation against the limit (gpu_time). `goal`
    says which of the two the row is judged by ("throughput" or "gpu_time"): its "met"."""
    rows = {"none": _row(run([{}], f"{tag}solo", args=args))}
    for lim in limits:
        row = _row(run([{"NVSHARE_COMPUTE_LIMIT": lim}], f"{tag}limit{lim}", args=args))
        throughput = judge_limit(rows["none"]["ips"], row["ips"], lim)
        gpu_time = judge_gpu_time(row["clocks"], lim)
        rows[str(lim)] = {**row, "percent": throughput["percent"],
                          "throughput_met": throughput["met"], "gpu_time": gpu_time, "goal": goal,
                          "met": throughput["met"] if goal == "throughput" else gpu_time["met"]}
    return rows


def measure_parts(p: dict, python: str, env, tmp: Path, set_limit, sampler: ClockSampler | None,
                  script: Path = WORKLOAD) -> dict:
    """All four parts. env(**extra) -> a workload's environment; set_limit(pid, pct) -> the
    scheduler's reply to set_compute_limit."""
    def run(extras: list[dict], tag: str, seconds: float = p["seconds"], args=(), during=None):
        return run_group([env(**e) for e in extras], python, seconds, tmp, tag, script, tuple(args),
                         during, sampler)

    # Arithmetic-bound products hold the GPU at its power cap alone, so their throughput under a
    # limit gains from the higher clock: they are judged by GPU time. The memory-bound sums run at
    # one clock whatever the limit: judged by throughput, and used for graphs and the live change,
    # whose numbers then speak of the limiter and not of the GPU's power state.
    limits = _limit_rows(run, p["limits"], (), "", "gpu_time")
    memory_bound = _limit_rows(run, p["limits"], MEMORY_BOUND_ARGS, "add_", "throughput")
    assert p["graph_live_op"] == "add"  # the report names their unit from it
    graph_args = [*MEMORY_BOUND_ARGS, "--graph"]
    graph = {"solo": _row(run([{}], "graph", args=graph_args))}
    row = _row(run([{"NVSHARE_COMPUTE_LIMIT": p["graph_limit"]}], "graph_limit", args=graph_args))
    graph["limited"] = {**row, "limit": p["graph_limit"],
                        **judge_limit(graph["solo"]["ips"], row["ips"], p["graph_limit"])}
    live = _live(p, run, set_limit, memory_bound["none"]["ips"], MEMORY_BOUND_ARGS)
    pair = run([{}, {}], "pair")
    shared = run([{"NVSHARE_COMPUTE_SHARE": s} for s in p["shares"]], "shares")
    without = [r["ips"] for r in pair["results"]]
    with_ = [r["ips"] for r in shared["results"]]
    shares = {"without": without, "with": with_, "clocks_without": pair["clocks"],
              "clocks_with": shared["clocks"], "verdict": judge_shares(without, with_, p["shares"])}
    return {"limits": limits, "memory_bound": memory_bound, "graph": graph, "live": live,
            "shares": shares}


def scheduler_set_limit(sock: Path):
    """set_limit(pid, pct) through the scheduler's control operation, as `nvsharectl
    --set-compute-limit PCT --pid PID` sends it: the scheduler's reply."""
    def set_limit(pid: int, pct: float) -> dict:
        from xpushare.cli.client import CtlClient

        with CtlClient(sock) as ctl:
            return ctl.request("set_compute_limit", value=pct, pid=pid)
    return set_limit


def measure(quick: bool = False, seconds: float | None = None, tq: float | None = None) -> dict:
    from bench.core.common import harness, require_safe_gpu

    require_safe_gpu()
    p = plan(quick, seconds, tq)
    python = torch_python()
    lib = harness.library_path()
    argv = smi_argv(harness.visible_gpu_index())
    with harness.Scheduler(mode="auto", tq=p["tq"]) as sched, ClockSampler(argv) as sampler:
        def env(**extra):
            return harness.library_env(lib, sched.socket, NVSHARE_GPU_MEMORY_LIMIT=MEMORY_LIMIT,
                                       **extra)

        parts = measure_parts(p, python, env, sched.workdir, scheduler_set_limit(sched.socket),
                              sampler)
    return {"parameters": {**p, "python": python, "scheduler_mode": "auto",
                           "memory_limit": MEMORY_LIMIT, "goal_points": GOAL_POINTS,
                           "goal_combined": GOAL_COMBINED, "clocks": argv is not None},
            **parts}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    quick = quick or (time_left is not None and time_left < 180)
    result = measure(quick=quick)
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


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
    finish(result, t0, RERUN, args.quick, section, args.json)
    return 0 if all_met(result) else 1


if __name__ == "__main__":
    sys.exit(main())
