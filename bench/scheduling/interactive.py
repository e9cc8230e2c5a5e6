#!/usr/bin/env python3
"""An interactive high-priority client next to a batch job: its wait for the GPU, and the batch
job's slowdown.

(long: one benchmark, its method written out below and the code that carries it out, per the
interface of bench/core/suite.py; the rendering is the last 70 lines.)

Two bench/scheduling/job_program.py processes under libnvshare.so, scheduler in mode auto (explicit TQ 30 s: only
priorities matter here):
- batch: MLP 1024x4, batch 256, a 6 GiB working set touched by every step; priority 0; it trains
  without pause for the whole measurement;
- interactive: MLP 512x2, batch 64, a 1 GiB working set; NVSHARE_PRIORITY=10; one small training step
  every --period (2 s), --count steps (10: 20 s of interactive steps).
The scheduler's virtual capacity holds either job but not both (halfway between, from the footprints
the jobs report), so each interactive step must preempt the batch job: the scheduler sends it
DROP_LOCK with EVICT, the batch job drains and moves its 6 GiB to host in bulk, releases, and the
interactive client is granted; when the interactive client goes idle it releases, and the batch job
is granted again and prefetches its working set back.

Measured, all in one run, with the same two processes:
1. the interactive step alone (--calibration-steps steps, 0.3 s apart, while the batch job is idle and
   the GPU is free): its median time. This is measured by the benchmark in a phase of its own rather
   than inside the job's warm-up, because during the warm-ups the other job may be using the GPU. The
   steps are 0.3 s apart, longer than the client's idle release, so each one, like the real ones, starts
   by asking the scheduler for the lock;
2. the batch job alone for --batch-alone-s: its throughput (steps/s);
3. both: the batch job starts, the interactive steps begin 1.5 s later; the batch job trains until
   0.5 s after the last period ends.
Wait of an interactive step = its time minus the median time alone (1): the time it waited for the GPU.
Switch of a step (from the scheduler's log): from the "drop" sent to the batch job to the batch job's
"release", plus the interactive client's own bulk prefetch (the prefetch= of its release; 0 when its
data was still on the GPU). Batch slowdown = throughput alone (2) / throughput during the interactive
steps (3: the batch steps that ended within the interactive periods, per second).

NVSHARE_IDLE_RELEASE_MS=50 for the interactive client only (the library's default, 250 ms, for the
batch job). An interactive client does one burst of work and then nothing until its next request;
after the step it holds the GPU until its idle release, while the preempted batch job waits. At 250 ms
that idle hold alone would cost the batch job an eighth of every 2 s period; 50 ms is the smallest
value with which no training loop released during its steps in the idle-release measurement (its step is a
few ms with a synchronize, far from 50 ms idle). It does not change the interactive client's wait.
--idle-release-ms 250 measures the default.

Goal: p99 wait < 100 ms + the switch time, i.e. p99_minus_switch_ms < 100. With 10 steps the
p99 is close to the largest wait; the samples are in the results.

GPU safety: nothing starts when the GPU has less than 48 GiB free; the two jobs allocate ~8 GiB under
the library (limit 24 GiB); both processes are ended when the benchmark ends, also on errors.
Budget ~50 s (quick: 7 steps, ~40 s).

Result of run(quick, time_left) (JSON-serialisable; ms where named so):
  {"wait_ms": {"p50", "p99", "mean", "max", "n", "samples": [...]},
   "switch_ms": median switch, "switch_ms_p99", "p99_minus_switch_ms", "goal_ms": 100, "met": bool,
   "excess_ms": {"p50", "p99"} (per step: wait - that step's switch),
   "batch_slowdown": r, "batch_steps_per_s": {"alone", "together"},
   "interactive_alone_ms", "grant_wait_ms": [...] (step start -> the scheduler's grant line),
   "steps": [{"t0", "step_ms", "wait_ms", "switch_ms", "handoff_ms", "drain_ms", "evict_ms",
              "prefetch_ms", "grant_wait_ms", "drop_reason"}],
   "batch_switches": {"count", "evicting", "reasons", "handoff_ms", "drain_ms", "evict_ms",
                      "prefetch_ms", "prefetches"},
   "params": {"count", "period_s", "batch_size", "interactive_size", "priority", "idle_release_ms",
              "capacity", "mode", "tq"}, "separation": {...}, "correctness": {...}, "notes", "seconds"}

    python3 -m bench.scheduling.interactive [--quick] [--count 10] [--period 2] [--json out.json]
    python3 -m bench.scheduling.interactive --dry-run --quick    # no GPU: simulated jobs, checks the plumbing
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.core import gpu_memory
from bench.scheduling import job_program
from bench.scheduling import jobs
from bench.core import schedlog
from bench.core import stats
from bench.core.common import harness, require_safe_gpu, say
from bench.core.argtypes import positive
from bench.scheduling.job_program import GIB
from bench.scheduling.jobs import JobGroup, JobSize
from bench.core.render import bars, dig, error_of, error_row, extra_text, f, goal_row, num

PREFIX = "interactive"
NAME = "interactive"
TITLE = "Interactive client next to a batch job"
SHARE, MIN_S, GPU = 50, 25, True
RERUN = "python3 -m bench.scheduling.interactive"
PLOTS = {"interactive.png": "interactive wait vs switch time"}
BATCH_SIZE = JobSize(width=1024, depth=4, batch=256, resident_gib=6.0)
INTERACTIVE_SIZE = JobSize(width=512, depth=2, batch=64, resident_gib=1.0)
PRIORITY = 10
PERIOD_S = 2.0
IDLE_RELEASE_MS = 50
TQ = 30
GOAL_MS = 100.0
CALIBRATION_PERIOD_S = 0.3
LEAD_S = 1.5  # the batch job runs alone this long before the first interactive step
TAIL_S = 0.5
READY_TIMEOUT_S = 240.0
LOG_GRACE_S = 0.3
SIMULATED_STEP_MS = 5.0


@dataclass
class InteractivePlan:
    count: int = 10
    period: float = PERIOD_S
    batch_alone_s: float = 6.0
    calibration_steps: int = 10
    batch: JobSize = BATCH_SIZE
    interactive: JobSize = INTERACTIVE_SIZE
    priority: int = PRIORITY
    idle_release_ms: int = IDLE_RELEASE_MS  # of the interactive client; -1: the library's default
    capacity: int | None = None  # the scheduler's --gpu-memory; else one that separates the two
    notes: list[str] = field(default_factory=list)

    def together_s(self) -> float:
        return LEAD_S + self.count * self.period + TAIL_S

    def estimate_s(self) -> float:
        init = 10.0 + 0.75 * 2
        calibration = self.calibration_steps * CALIBRATION_PERIOD_S + 1.5
        return init + calibration + self.batch_alone_s + 1.0 + self.together_s() + 1.0 + 2.0


def plan_interactive(quick: bool, time_left: float | None, **overrides) -> InteractivePlan:
    """Full: 10 interactive steps, the batch job 6 s alone; quick: 7 steps, 4 s; with little time: 5
    steps, 3 s. Overrides (count, period, sizes, ...) apply to every candidate."""
    candidates = [InteractivePlan(10, batch_alone_s=6.0), InteractivePlan(7, batch_alone_s=4.0),
                  InteractivePlan(5, batch_alone_s=3.0)]
    set_values = {k: v for k, v in overrides.items() if v is not None}
    candidates = [replace(p, **set_values) for p in candidates]
    if quick:
        candidates = candidates[1:]
    for plan in candidates:
        if time_left is None or plan.estimate_s() <= time_left:
            if plan is not candidates[0] and not quick:
                plan.notes.append(f"shortened to fit the time left ({time_left:.0f} s)")
            return plan
    raise RuntimeError(f"interactive: not enough time: the smallest plan needs "
                       f"~{candidates[-1].estimate_s():.0f} s, {time_left:.0f} s left")


# ----------------------------------------------------------------------------- results (pure)

def throughput(result: dict, t0: float | None = None, t1: float | None = None) -> float | None:
    """Steps per second of a train result: over the whole run, or counting the steps that ended
    within [t0, t1] (step ends: t_start plus the running sum of step times)."""
    if t0 is None or t1 is None:
        seconds = result["t_end"] - result["t_start"]
        return result["steps"] / seconds if seconds > 0 else None
    end, done = result["t_start"], 0
    for dt in result["step_s"]:
        end += dt
        if t0 <= end <= t1:
            done += 1
    return done / (t1 - t0) if t1 > t0 else None


def step_switches(events: list, step: dict, batch_pid: int, interactive_pid: int) -> dict:
    """What the scheduler's log says about one interactive step [t0, t1]: the drop it caused to the
    batch job and that job's release (handoff, drain, evict), the interactive client's grant, and
    the bulk prefetch it reported when it released afterwards."""
    t0, t1 = step["t0"], step["t1"]
    found = schedlog.switches(events, [batch_pid], t0, t1)
    grant = next((g for g in schedlog.grants(events, [interactive_pid], t0, t1)), None)
    own = next((r for r in schedlog.releases(events, [interactive_pid], t1, float("inf"))), None)
    drop = found[0] if found else None
    own_prefetch = (own or {}).get("prefetch_ms") or 0.0
    handoff = None if drop is None else drop["handoff_ms"]
    return {
        "drop_reason": None if drop is None else drop["reason"],
        "handoff_ms": handoff,
        "drain_ms": None if drop is None else drop["drain_ms"],
        "evict_ms": None if drop is None else drop["evict_ms"],
        "prefetch_ms": own_prefetch,
        "switch_ms": None if handoff is None else handoff + own_prefetch,
        "grant_wait_ms": None if grant is None else (grant["t"] - t0) * 1e3,
    }


def interactive_results(plan: InteractivePlan, calibration: dict, batch_alone: dict, batch_together: dict,
                        interactive_together: dict, events: list, batch_pid: int, interactive_pid: int) -> dict:
    alone_s = stats.median(s["dt"] for s in calibration["steps"])
    steps = []
    for s in interactive_together["steps"]:
        row = {"t0": s["t0"], "step_ms": s["dt"] * 1e3,
               "wait_ms": None if alone_s is None else (s["dt"] - alone_s) * 1e3}
        row.update(step_switches(events, s, batch_pid, interactive_pid))
        steps.append(row)
    waits = [r["wait_ms"] for r in steps if r["wait_ms"] is not None]
    switch_values = [r["switch_ms"] for r in steps if r["switch_ms"] is not None]
    excess = [r["wait_ms"] - r["switch_ms"] for r in steps
              if r["wait_ms"] is not None and r["switch_ms"] is not None]
    p99 = stats.percentile(waits, 99)
    switch = stats.median(switch_values)
    p99_minus = None if p99 is None or switch is None else p99 - switch
    first = interactive_together["steps"][0]["planned"]
    window = (first, first + plan.count * plan.period)
    alone_rate = throughput(batch_alone)
    together_rate = throughput(batch_together, *window)
    t0, t1 = window[0], interactive_together["t_end"] + LOG_GRACE_S
    batch_found = schedlog.switches(events, [batch_pid], t0, t1)
    return {
        "wait_ms": {"p50": stats.percentile(waits, 50), "p99": p99,
                    "mean": sum(waits) / len(waits) if waits else None,
                    "max": max(waits, default=None), "n": len(waits), "samples": waits},
        "switch_ms": switch, "switch_ms_p99": stats.percentile(switch_values, 99),
        "p99_minus_switch_ms": p99_minus, "goal_ms": GOAL_MS,
        "met": None if p99_minus is None else p99_minus < GOAL_MS,
        "excess_ms": {"p50": stats.percentile(excess, 50), "p99": stats.percentile(excess, 99)},
        "batch_slowdown": stats.ratio(alone_rate, together_rate),
        "batch_steps_per_s": {"alone": alone_rate, "together": together_rate},
        "interactive_alone_ms": None if alone_s is None else alone_s * 1e3,
        "calibration_ms": [s["dt"] * 1e3 for s in calibration["steps"]],
        "grant_wait_ms": [r["grant_wait_ms"] for r in steps],
        "steps": steps,
        "batch_switches": schedlog.switch_totals(batch_found, schedlog.releases(events, [batch_pid], t0, t1)),
        "batch_alone": jobs.summarise_train(batch_alone),
        "batch_together": jobs.summarise_train(batch_together),
        # The batch job trains for a time, not a number of steps: its losses differ; its working set must not.
        "correctness": jobs.correctness([jobs.summarise_train(batch_alone), jobs.summarise_train(batch_together)],
                                        same_work=False),
    }


# ----------------------------------------------------------------------------- measuring

def measure_interactive(lib: Path | None, plan: InteractivePlan, *, simulate_ms: float | None = None,
                        mode: str = "auto", scheduler_args: tuple[str, ...] = ()) -> dict:
    """The interactive benchmark. lib None with simulate_ms: a dry run without the library and without a GPU."""
    estimates = [plan.batch.footprint_estimate(), plan.interactive.footprint_estimate()]
    problem = gpu_memory.library_total_problem(estimates)
    if problem:
        raise RuntimeError(problem)
    capacity = plan.capacity or gpu_memory.separating_capacity(estimates)
    t_begin = time.monotonic()
    with harness.Scheduler(mode=mode, tq=TQ, extra_args=("--gpu-memory", str(capacity), *scheduler_args)) as sched, \
            JobGroup(PREFIX) as group:
        interactive_env: dict[str, object] = {"NVSHARE_PRIORITY": plan.priority}
        if plan.idle_release_ms >= 0:
            interactive_env["NVSHARE_IDLE_RELEASE_MS"] = plan.idle_release_ms
        group.start("batch", jobs.job_argv(plan.batch, simulate_ms),
                    jobs.library_env(harness, lib, sched.socket, capacity))
        group.start("interactive", jobs.job_argv(plan.interactive, simulate_ms),
                    jobs.library_env(harness, lib, sched.socket, capacity, **interactive_env))
        say(PREFIX, f"starting the batch job and the interactive client (~{plan.estimate_s():.0f} s planned)")
        group.wait_ready(READY_TIMEOUT_S)
        say(PREFIX, f"  ready after {time.monotonic() - t_begin:.1f} s")
        pids = [group.pid("batch"), group.pid("interactive")]
        separation = gpu_memory.ensure_separating(sched.socket, pids, capacity, PREFIX)
        time.sleep(0.5)  # both idle longer than their idle release: the GPU is free

        start = time.monotonic() + jobs.START_MARGIN_S
        calibration = group.run({"interactive": job_program.interactive_command(
            start, CALIBRATION_PERIOD_S, plan.calibration_steps)},
            timeout=60 + plan.calibration_steps * CALIBRATION_PERIOD_S)["interactive"]
        say(PREFIX, f"  interactive step alone: {stats.median(s['dt'] for s in calibration['steps']) * 1e3:.2f} ms")

        batch_alone = group.train(["batch"], seconds=plan.batch_alone_s,
                                  timeout=60 + 2 * plan.batch_alone_s).results["batch"]
        say(PREFIX, f"  batch alone: {batch_alone['steps']} steps in "
                    f"{batch_alone['t_end'] - batch_alone['t_start']:.2f} s")

        start = time.monotonic() + jobs.START_MARGIN_S
        first = start + LEAD_S
        until = first + plan.count * plan.period + TAIL_S
        together = group.run({
            "batch": job_program.train_command(start, until=until),
            "interactive": job_program.interactive_command(first, plan.period, plan.count),
        }, timeout=90 + 2 * plan.together_s())
        time.sleep(LOG_GRACE_S)
        events = sched.events()
    result = interactive_results(plan, calibration, batch_alone, together["batch"], together["interactive"],
                                 events, pids[0], pids[1])
    result.update(params={"count": plan.count, "period_s": plan.period, "batch_size": plan.batch.as_dict(),
                          "interactive_size": plan.interactive.as_dict(), "priority": plan.priority,
                          "idle_release_ms": plan.idle_release_ms, "capacity": separation["capacity"],
                          "mode": mode, "tq": TQ, "simulated": simulate_ms is not None},
                  separation=separation, notes=plan.notes)
    result["method"] = describe(plan, separation["capacity"], mode, result)
    if result["switch_ms"] is None and simulate_ms is None:
        result["notes"].append("no drop of the batch job was seen during an interactive step: "
                               "the interactive client did not preempt it")
    return result


def describe(plan: InteractivePlan, capacity: int, mode: str, result: dict) -> str:
    """The parameters of a run in words, for the report."""
    b, i = plan.batch, plan.interactive
    idle = (f"NVSHARE_IDLE_RELEASE_MS={plan.idle_release_ms}" if plan.idle_release_ms >= 0
            else "the library's default idle release")
    alone = result.get("interactive_alone_ms")
    return (f"Batch job: MLP {b.width}x{b.depth}, batch {b.batch}, a {b.resident_gib:g} GiB working set touched by "
            f"every step. Interactive client: MLP {i.width}x{i.depth}, batch {i.batch}, {i.resident_gib:g} GiB, "
            f"NVSHARE_PRIORITY={plan.priority}, {idle}; {plan.count} steps, one every {plan.period:g} s. "
            f"Scheduler: mode {mode}, TQ {TQ} s, virtual capacity {capacity / GIB:.2f} GiB (either job fits, "
            f"both do not). The interactive step alone ({'?' if alone is None else f'{alone:.2f}'} ms, median of "
            f"{plan.calibration_steps}) was measured in the same run while the batch job was idle; the batch "
            f"job's throughput alone over {plan.batch_alone_s:g} s, alongside over the interactive periods.")


def run(quick: bool = False, time_left: float | None = None, *, mode: str = "auto", dry_run: bool = False,
        **overrides) -> dict:
    """The interactive benchmark with the plan that fits time_left (seconds); overrides: InteractivePlan's fields (None: the
    plan's value). dry_run: simulated jobs, no library, no GPU."""
    t0 = time.monotonic()
    plan = plan_interactive(quick, time_left, **overrides)
    if not dry_run:
        require_safe_gpu(strict=False)
    result = measure_interactive(None if dry_run else harness.library_path(), plan,
                                 simulate_ms=SIMULATED_STEP_MS if dry_run else None, mode=mode,
                                 scheduler_args=("--no-nvml",) if dry_run else ())
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["quick"] = quick
    print_summary(result)
    return result


def print_summary(result: dict) -> None:
    def fmt(v: float | None, digits: int = 1) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    w = result["wait_ms"]
    say(PREFIX, f"wait: p50 {fmt(w['p50'])} ms, p99 {fmt(w['p99'])} ms (n={w['n']}); switch "
                f"{fmt(result['switch_ms'])} ms; p99 - switch {fmt(result['p99_minus_switch_ms'])} ms "
                f"(goal < {GOAL_MS:.0f}); batch slowdown {fmt(result['batch_slowdown'], 3)}x")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="7 interactive steps instead of 10")
    p.add_argument("--time-left", type=positive(float), metavar="SECONDS", help="fit the plan into this")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results here")
    p.add_argument("--count", type=positive(int), help="interactive steps")
    p.add_argument("--period", type=positive(float), help=f"seconds between interactive steps ({PERIOD_S:g})")
    p.add_argument("--batch-alone-s", type=positive(float), help="seconds the batch job runs alone")
    p.add_argument("--batch-resident-gib", type=positive(float), default=BATCH_SIZE.resident_gib)
    p.add_argument("--interactive-resident-gib", type=positive(float), default=INTERACTIVE_SIZE.resident_gib)
    p.add_argument("--priority", type=int, default=PRIORITY, help="NVSHARE_PRIORITY of the interactive client")
    p.add_argument("--idle-release-ms", type=int, default=IDLE_RELEASE_MS,
                   help="NVSHARE_IDLE_RELEASE_MS of the interactive client (-1: the library's default)")
    p.add_argument("--capacity-gib", type=positive(float),
                   help="the scheduler's virtual capacity (default: halfway between one job and both)")
    p.add_argument("--mode", choices=["auto", "serial", "off"], default="auto",
                   help="the scheduler's mode (default auto)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: simulated jobs, no library (checks the orchestration only)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {
        "count": args.count, "period": args.period, "batch_alone_s": args.batch_alone_s,
        "batch": replace(BATCH_SIZE, resident_gib=args.batch_resident_gib),
        "interactive": replace(INTERACTIVE_SIZE, resident_gib=args.interactive_resident_gib),
        "priority": args.priority,
        "capacity": None if args.capacity_gib is None else int(args.capacity_gib * GIB),
        "idle_release_ms": max(-1, args.idle_release_ms),
    }
    result = run(args.quick, args.time_left, mode=args.mode, dry_run=args.dry_run, **overrides)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


# ----------------------------------------------------------------------------- its report

def p99_minus_switch(section: dict) -> float | None:
    """The benchmark's own figure when it gives one, else p99 wait minus the median switch."""
    given = num(section.get("p99_minus_switch_ms"))
    if given is not None:
        return given
    p99, switch = num(dig(section, "wait_ms", "p99")), num(section.get("switch_ms"))
    return None if p99 is None or switch is None else p99 - switch


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("interactive p99 wait", error_of(section))]
    p99, switch = num(dig(section, "wait_ms", "p99")), num(section.get("switch_ms"))
    excess = p99_minus_switch(section)
    limit = None if switch is None else GOAL_MS + switch
    rows = [goal_row("interactive client (priority 10) next to a batch job: p99 wait for the GPU",
                 f"{f(p99, 1)} ms (p50 {f(dig(section, 'wait_ms', 'p50'), 1)} ms)",
                 f"{f(switch, 1)} ms (switch time)",
                 f"p99 − switch = **{f(excess, 1)} ms**",
                 f"< {GOAL_MS:g} ms + switch" + (f" = {limit:.1f} ms" if limit else ""),
                 None if excess is None else excess < GOAL_MS)]
    slowdown = num(section.get("batch_slowdown"))
    if slowdown is not None:
        rows.append(goal_row("the batch job's slowdown next to it (throughput alone / alongside)",
                         f"{slowdown:.3f}x", "the batch job alone", f"{slowdown:.3f}x", "—", None))
    return rows


def section(s: dict) -> str:
    wait = s.get("wait_ms") or {}
    excess = s.get("excess_ms") if isinstance(s.get("excess_ms"), dict) else {}
    lines = ["| measured | value |", "|---|---:|",
             f"| interactive wait for the GPU, p50 | {f(wait.get('p50'))} ms |",
             f"| interactive wait for the GPU, p99 | **{f(wait.get('p99'))} ms** |",
             f"| switch time (batch job's drop → release, + prefetch), median | {f(s.get('switch_ms'))} ms |",
             f"| p99 − switch (goal < {GOAL_MS:g} ms) | **{f(p99_minus_switch(s))} ms** |",
             f"| per step, wait − that step's switch: p50 / p99 | {f(excess.get('p50'))} / {f(excess.get('p99'))} ms |",
             f"| batch job's slowdown (throughput alone / alongside) | {f(s.get('batch_slowdown'), 3)}x |",
             f"| interactive steps measured | {wait.get('n', '—')} |"]
    shown = {"wait_ms", "switch_ms", "batch_slowdown", "p99_minus_switch_ms", "excess_ms", "goal_ms"}
    for key, value in s.items():
        if key in shown or not isinstance(num(value), float):
            continue
        if key not in ("seconds", "time_left_s", "quick"):
            lines.append(f"| {key} | {value if isinstance(value, int) else f(value, 3)} |")
    return "\n".join(lines) + (
        "\n\nA batch job with a resident working set and an interactive client (NVSHARE_PRIORITY=10, one small "
        "step every 2 s) under the library, mode auto, a virtual capacity that does not hold both: each "
        "interactive step preempts the batch job (drain + eviction). Wait = the step's time minus its time "
        "alone. The batch job's slowdown compares its throughput alone and alongside, both in the same run.\n"
        + extra_text(s))


def plot_interactive(plt, s: dict):
    wait = s.get("wait_ms") or {}
    switch = num(s.get("switch_ms"))
    values = {"p50 wait": num(wait.get("p50")), "p99 wait": num(wait.get("p99")), "switch": switch}
    if all(v is None for v in values.values()):
        return None
    limit = None if switch is None else (switch + GOAL_MS, "goal: switch + 100 ms")
    return bars(plt, list(values), {"ms": list(values.values())}, "ms",
                 "interactive client's wait for the GPU", hline=limit)


def plot(s: dict, plt) -> dict:
    return {"interactive.png": plot_interactive(plt, s)}


if __name__ == "__main__":
    sys.exit(main())
