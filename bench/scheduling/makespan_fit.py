"""Jobs that fit: the makespan of identical training jobs whose memory fits together, in the scheduler's
auto mode, against the same jobs run concurrently without the library and one after the other.

The method, the parameters and the result's shape are described in bench/scheduling/makespan.py, which also holds
what both makespan benchmarks share and their command line (`python3 -m bench.scheduling.makespan --jobs 2,4`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.core import gpu_memory
from bench.scheduling import jobs
from bench.core import stats
from bench.core.common import harness, say
from bench.scheduling.job_program import GIB
from bench.scheduling.jobs import Deadline, JobGroup, JobSize
from bench.scheduling.makespan_common import (FIT_CAPACITY, FIT_GOAL, FIT_SIZE, FIT_TQ, PREFIX, READY_TIMEOUT_S, _alone,
                      _fit, _job_words, _probe, init_estimate_s, measured, round_record, steps_for)
from bench.core.render import (dig, error_of, error_row, extra_text, f, goal_row, num, numeric_items, seconds,
                    table_bars, yes_no)

NAME = "makespan_fit"
TITLE = "Jobs that fit: auto mode vs concurrent vs one after the other"
SHARE, MIN_S, GPU = 120, 40, True
RERUN = "python3 -m bench.scheduling.makespan --jobs 2,4"
PLOTS = {"makespan-fit.png": "makespans of jobs that fit"}


@dataclass
class FittingPlan:
    counts: tuple[int, ...] = (2, 4)
    reps: int = 2
    alone_s: float = 4.5
    size: JobSize = FIT_SIZE
    steps: int | None = None  # fixed; else from alone_s and the probe
    notes: list[str] = field(default_factory=list)

    def round_s(self, count: int) -> float:
        """One round of `count` jobs at once (a guess: the GPU is busy ~40% of a job's step)."""
        return self.alone_s * max(1.0, 0.4 * count) + 1.0

    def estimate_s(self) -> float:
        n = max(self.counts)
        sequential = n * (self.alone_s + 1.0)
        rep = sum(2 * self.round_s(c) for c in self.counts)
        return init_estimate_s(2 * n) + 1.0 + sequential + self.reps * rep + 3.0


def plan_fitting(quick: bool, time_left: float | None, counts: tuple[int, ...] = (2, 4),
                 size: JobSize = FIT_SIZE, alone_s: float | None = None, reps: int | None = None,
                 steps: int | None = None) -> FittingPlan:
    """Full: both counts, 2 repetitions of 4.5 s jobs; quick: 1 repetition of 3 s jobs; with little
    time: the smallest count only, 2.5 s jobs."""
    candidates = [FittingPlan(counts, 2, 4.5, size, steps), FittingPlan(counts, 1, 3.0, size, steps),
                  FittingPlan((min(counts),), 1, 2.5, size, steps)]
    if alone_s is not None or reps is not None:
        candidates = [replace(p, alone_s=alone_s or p.alone_s, reps=reps or p.reps) for p in candidates]
    plan = _fit(candidates, quick, time_left, "fitting jobs")
    if plan is not candidates[0] and not quick:
        plan.notes.append(f"shortened to fit the time left ({time_left:.0f} s)")
    return plan


def fitting_results(plan: FittingPlan, steps: int, alone: list[dict], rounds: list[dict]) -> dict:
    """makespan_fit from its measurements: `alone` = summaries of the native jobs alone, in order; `rounds` =
    round_record()s labelled way ("concurrent" | "auto"), count and rep."""
    table: dict[int, dict] = {}
    for count in plan.counts:
        reps = {way: [r for r in rounds if r["way"] == way and r["count"] == count]
                for way in ("concurrent", "auto")}
        if not reps["concurrent"] and not reps["auto"]:
            continue
        auto = stats.median(r["makespan_s"] for r in reps["auto"])
        concurrent = stats.median(r["makespan_s"] for r in reps["concurrent"])
        sequential = sum(s["seconds"] for s in alone[:count]) if len(alone) >= count else None
        by_rep = {(r["way"], r["rep"]): r["makespan_s"] for r in rounds if r["count"] == count}
        pairs = [stats.ratio(by_rep[("auto", rep)], by_rep[("concurrent", rep)])
                 for rep in sorted({rep for _, rep in by_rep})
                 if ("auto", rep) in by_rep and ("concurrent", rep) in by_rep]
        vs_concurrent = stats.ratio(auto, concurrent)
        table[count] = {
            "auto": auto, "concurrent": concurrent, "sequential": sequential,
            "auto_vs_concurrent": vs_concurrent, "auto_vs_sequential": stats.ratio(auto, sequential),
            "concurrent_vs_sequential": stats.ratio(concurrent, sequential),
            "auto_reps": [r["makespan_s"] for r in reps["auto"]],
            "concurrent_reps": [r["makespan_s"] for r in reps["concurrent"]],
            "pair_ratios": pairs, "goal": FIT_GOAL,
            "met": None if vs_concurrent is None else vs_concurrent <= FIT_GOAL,
        }
    everyone = alone + [j for r in rounds for j in r["jobs"]]
    return {"jobs": table, "steps": steps, "alone": alone, "rounds": rounds,
            "correctness": jobs.correctness(everyone)}


def measure_fitting(lib: Path | None, plan: FittingPlan, deadline: Deadline, *, simulate_ms: float | None = None,
                    mode: str = "auto", scheduler_args: tuple[str, ...] = ()) -> dict:
    """makespan_fit. lib None with simulate_ms: a dry run without the library and without a GPU."""
    n = max(plan.counts)
    problem = gpu_memory.library_total_problem([plan.size.footprint_estimate()] * n)
    if problem:
        raise RuntimeError(problem)
    native = [f"native{i}" for i in range(1, n + 1)]
    shared = [f"auto{i}" for i in range(1, n + 1)]
    argv = jobs.job_argv(plan.size, simulate_ms)
    t0 = time.monotonic()
    with harness.Scheduler(mode=mode, tq=FIT_TQ,
                           extra_args=("--gpu-memory", str(FIT_CAPACITY), *scheduler_args)) as sched, \
            JobGroup(PREFIX) as group:
        for name in native:
            group.start(name, argv, jobs.native_env(harness))
        for name in shared:
            group.start(name, argv, jobs.library_env(harness, lib, sched.socket, FIT_CAPACITY))
        say(PREFIX, f"fitting: starting {2 * n} jobs (~{plan.estimate_s():.0f} s planned)")
        group.wait_ready(READY_TIMEOUT_S)
        say(PREFIX, f"  all ready after {time.monotonic() - t0:.1f} s")
        step_s = _probe(group, native[0])
        steps = plan.steps or steps_for(plan.alone_s, step_s)
        say(PREFIX, f"  probe: {step_s * 1e3:.3f} ms/step -> {steps} steps a job")
        fit = gpu_memory.fit_check(sched.socket, [group.pid(s) for s in shared], FIT_CAPACITY)
        alone = _alone(group, native, steps, step_s)
        timeout = 60 + 4 * n * steps * step_s
        rounds: list[dict] = []
        for rep in range(plan.reps):
            rep_s = sum(2 * plan.round_s(c) for c in plan.counts)
            if rep and not deadline.allows(rep_s + 3):
                plan.notes.append(f"stopped after {rep} repetition(s): time limit")
                break
            for i, count in enumerate(plan.counts):
                ways = ("concurrent", "auto") if (rep + i) % 2 == 0 else ("auto", "concurrent")
                for way in ways:
                    names = (native if way == "concurrent" else shared)[:count]
                    record = round_record(group.train(names, steps=steps, timeout=timeout),
                                          way=way, count=count, rep=rep)
                    rounds.append(record)
                    say(PREFIX, f"  {count} jobs {way}: makespan {record['makespan_s']:.2f} s")
    result = fitting_results(plan, steps, alone, rounds)
    result.update(params={"counts": list(plan.counts), "reps": plan.reps, "alone_s": plan.alone_s,
                          "steps": steps, "size": plan.size.as_dict(), "capacity": FIT_CAPACITY,
                          "mode": mode, "tq": FIT_TQ, "simulated": simulate_ms is not None},
                  probe_step_ms=step_s * 1e3, fit=fit, notes=plan.notes,
                  method=(f"Jobs: {_job_words(plan.size)}; {steps} steps each (~{steps * step_s:.1f} s alone at the "
                          f"probe's {step_s * 1e3:.2f} ms/step). Sequential: the native jobs alone, one after "
                          f"the other; then {plan.reps} repetition(s) of concurrent (no library) and auto (under "
                          f"the library, scheduler mode {mode}, capacity {FIT_CAPACITY / GIB:.0f} GiB) in "
                          f"alternating order. Every job of a round starts at one instant, after all have "
                          f"initialised."))
    if fit.get("fit") is False:
        result["notes"].append("the jobs' footprints did not all fit the capacity: auto could not run them at once")
    return result


def run_fitting(quick: bool = False, time_left: float | None = None, *, counts: tuple[int, ...] = (2, 4),
                size: JobSize = FIT_SIZE, alone_s: float | None = None, reps: int | None = None,
                steps: int | None = None, mode: str = "auto", dry_run: bool = False) -> dict:
    """makespan_fit with the plan that fits time_left (seconds). dry_run: simulated jobs, no library, no GPU."""
    t0 = time.monotonic()
    plan = plan_fitting(quick, time_left, counts, size, alone_s, reps, steps)
    return measured(measure_fitting, plan, t0, time_left, quick, mode, dry_run, "fitting")


run = run_fitting  # the suite's entry point: run(quick, time_left)


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("jobs that fit: auto vs concurrent", error_of(section))]
    rows = []
    for n, row in numeric_items(dig(section, "jobs")):
        r = num(dig(row, "auto_vs_concurrent"))
        rows.append(goal_row(f"{n} jobs that fit: makespan in auto mode vs concurrent without the library",
                         f"{f(dig(row, 'auto'), 2)} s", f"{f(dig(row, 'concurrent'), 2)} s (concurrent)",
                         f"**{f(r, 3)}x**", f"≤ {FIT_GOAL:.2f}x", None if r is None else r <= FIT_GOAL))
    return rows or [error_row("jobs that fit", "no 'jobs' in the result")]


def section(s: dict) -> str:
    lines = ["| jobs | concurrent, no library s | auto mode s | one after the other s | **auto / concurrent** "
             "| auto / sequential | ≤ 1.02x |", "|---:|---:|---:|---:|---:|---:|---|"]
    for n, row in numeric_items(s.get("jobs")):
        r = num(dig(row, "auto_vs_concurrent"))
        lines.append(f"| {n} | {seconds(dig(row, 'concurrent'))} | {seconds(dig(row, 'auto'))} | "
                     f"{seconds(dig(row, 'sequential'))} | **{f(r, 3)}x** | {f(dig(row, 'auto_vs_sequential'), 3)}x | "
                     f"{yes_no(None if r is None else r <= FIT_GOAL)} |")
    if len(lines) == 2:
        lines.append("| — | not measured: no 'jobs' in the result | | | | | |")
    return "\n".join(lines) + (
        "\n\nIdentical training jobs whose memory fits, three ways in the same run: concurrently without the "
        "library (the driver time-slices), concurrently under the library with the scheduler in mode auto "
        "(all fit, so all should be granted at once), and one after the other (each alone, the sum). "
        "Makespan: from a common start instant, after every job has initialised, to the last job's end.\n"
        + extra_text(s))


def plot(s: dict, plt) -> dict:
    ways = (("concurrent, no library", "concurrent"), ("auto mode", "auto"), ("one after the other", "sequential"))
    return {"makespan-fit.png": table_bars(plt, s.get("jobs"), ways, "{} jobs", "makespan s", "jobs that fit")}
