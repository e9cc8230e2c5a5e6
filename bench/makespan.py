#!/usr/bin/env python3
"""Makespans of training jobs sharing one GPU: jobs whose memory fits (the makespan_fit benchmark), and
a pair that does not (makespan_pair).

Every job is bench/job_program.py (a deterministic PyTorch MLP plus a resident working set touched by every
step); all jobs of a benchmark start their processes together, initialise (PyTorch and CUDA take 8-10 s)
and report READY; each measured round then starts its jobs at one common instant, and its makespan runs
from that instant to the end of the last job (time.monotonic(), system-wide, and a
torch.cuda.synchronize() after every step). The number of steps is the same in every round of a
benchmark: it is set from a probe (one job alone, 60 steps) so that one job alone takes --alone-s.
Every baseline is measured in the same run, with the same processes where possible.

makespan_fit, --jobs 2,4: identical jobs whose memory fits (MLP 1024x4, batch 256, 0.5 GiB working set: about
1 GiB each). Launch-bound: the GPU is idle for much of each step, so jobs that run at once finish
sooner than one after the other. Three ways:
  - concurrent: plain processes (no library), started together; the driver time-slices the GPU;
  - auto: the same jobs under libnvshare.so, scheduler in mode auto with a capacity of 16 GiB: all fit,
    so all should be granted at once and the makespan should equal concurrent's (goal <= 1.02x);
  - sequential: each job alone, back to back: the sum of their times alone.
One group of processes does all of it: N native and N library processes, started together; the
sequential runs use the native ones, one at a time; then, --reps times, for each count: concurrent
and auto, in alternating order (drift does not favour one side). Budget ~100 s (quick ~55 s).

makespan_pair, --pair: two jobs that do not fit: each has a working set of 6 GiB, and the scheduler's virtual
capacity (--gpu-memory) holds one of them but not both (chosen halfway between, from the footprints
the jobs report; oversubscription is virtual: the GPU itself has room for both). Mode auto, explicit
TQ 5 s and 30 s (set with set_tq between rounds); with NVSHARE_PREFETCH=wait ("fast": a holder whose
quantum ends drains and evicts its working set to host in bulk, the next holder gets it back by bulk
prefetch before it runs) and NVSHARE_PREFETCH=off ("demand": the same bulk eviction, the data comes
back by page faults); vs sequential: the two jobs alone without the library, back to back (what one
would do without sharing). Switches: the scheduler's "drop" lines for the pair during the round,
with the handoff (drop -> release), drain, evict and prefetch times from its "release" lines. A job
takes --alone-s (7.5 s) alone, so at TQ 5 s the pair switches two or three times; at TQ 30 s the first
job finishes inside its quantum and there is no switch at all: that is the result at 30 s, reported
as such. Processes: the native pair and the fast pair start together (4 processes, ~13 GiB under the
library), then the demand pair (a second start: NVSHARE_PREFETCH is read at start-up). The pair's jobs
run with NVSHARE_IDLE_RELEASE_MS=50 (--pair-idle-release-ms): they stay alive between rounds, and a job
that has finished should hand the GPU on about as soon as a job that exits would (at once, on
disconnect), not after the default 250 ms; 50 ms never released during a training loop in the idle-release
measurement (bench/idle_release.py), and the library does not count a prefetch or work in flight as idle. Budget ~120 s;
quick: TQ 5 s only, 6 s jobs, ~75 s.

GPU safety: nothing starts when the GPU has less than 48 GiB free; the processes under the library
allocate at most 24 GiB together (checked from the sizes before anything starts); every process
started is ended when the benchmark ends, also on errors and timeouts.

Results (JSON-serialisable; times in seconds unless named _ms; integer keys become strings in JSON):

run_fitting(quick, time_left) -> makespan_fit
  {"jobs": {2: {"auto": s, "concurrent": s, "sequential": s, "auto_vs_concurrent": r,
                "auto_vs_sequential": r, "concurrent_vs_sequential": r,
                "auto_reps": [s..], "concurrent_reps": [s..], "pair_ratios": [auto/concurrent per rep],
                "goal": 1.02, "met": bool},
            4: {...}},
   "params": {"counts", "reps", "alone_s", "steps", "size": {...}, "capacity", "mode", "tq"},
   "probe_step_ms", "alone": [job summaries], "rounds": [{"way", "count", "rep", "makespan_s",
   "jobs": [job summaries]}], "fit": {what the scheduler saw: footprints, budget, fit},
   "correctness": {"final_losses", "working_set_bad_pids", "ok"}, "notes": [...], "seconds"}
run_pair(quick, time_left) -> makespan_pair
  {"tq": {5: {"fast": s, "demand": s, "sequential": s, "fast_vs_sequential": r,
              "demand_vs_sequential": r, "switches": n (fast), "switches_demand": n,
              "fast_switch": {"count", "evicting", "reasons", "handoff_ms", "drain_ms", "evict_ms",
                              "prefetch_ms", "prefetches"}, "demand_switch": {...},
              "goal": 1.10, "met": bool, "note": "..." (when there was no switch)},
          30: {...}},
   "params": {"tqs", "alone_s", "steps", "size", "capacity", "mode", "idle_release_ms"}, "probe_step_ms",
   "alone": [job summaries], "rounds": [{"variant", "tq", "makespan_s", "jobs", "switches": [...],
   "releases": [...], "grants": [...]}], "separation": {footprints, budget, capacity, adjusted_from?},
   "correctness", "notes", "skipped": [...], "seconds"}
run(quick, time_left) -> {"fitting": run_fitting's dict, "pair": run_pair's dict}
Headline: fitting["jobs"][n]["auto_vs_concurrent"] (goal <= 1.02), pair["tq"][5]["fast_vs_sequential"]
(goal <= 1.10; nvshare: 1.94x).

    python3 bench/makespan.py [--jobs 2,4] [--pair] [--quick] [--json out.json]
    python3 bench/makespan.py --dry-run --quick      # no GPU: simulated jobs, checks the plumbing
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import gpu_memory
import jobs
import schedlog
import stats
from common import harness, require_safe_gpu, say
from argtypes import positive
from job_program import GIB
from jobs import Deadline, JobGroup, JobSize, Round

PREFIX = "makespan"
FIT_SIZE = JobSize(width=1024, depth=4, batch=256, resident_gib=0.5)
PAIR_SIZE = JobSize(width=1024, depth=4, batch=256, resident_gib=6.0)
FIT_CAPACITY = 16 * GIB  # every fitting job fits: 4 x ~1 GiB + contexts
FIT_TQ = 30  # nobody waits in makespan_fit: the quantum never comes into play
FIT_GOAL = 1.02
PAIR_GOAL = 1.10
PAIR_IDLE_RELEASE_MS = 50  # a pair job that has finished hands the GPU on about as soon as an exiting one would
PROBE_STEPS = 60
READY_TIMEOUT_S = 240.0
LOG_GRACE_S = 0.3  # scheduler log lines of a round's last release arrive a little after its end
SIMULATED_STEP_MS = 5.0


# ----------------------------------------------------------------------------- plans and estimates

def init_estimate_s(processes: int) -> float:
    """Start to READY of a group: PyTorch and CUDA (~10 s each, in parallel), allocation, warm-up."""
    return 10.0 + 0.75 * processes


def steps_for(alone_s: float, step_s: float | None) -> int:
    """Steps that make a job alone take about alone_s."""
    if not step_s or step_s <= 0:
        raise ValueError(f"no usable step time ({step_s!r})")
    return max(10, round(alone_s / step_s))


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


@dataclass
class PairPlan:
    tqs: tuple[int, ...] = (5, 30)
    alone_s: float = 7.5
    size: JobSize = PAIR_SIZE
    steps: int | None = None
    capacity: int | None = None  # the scheduler's --gpu-memory; else one that separates the pair
    idle_release_ms: int = PAIR_IDLE_RELEASE_MS  # of the pair's jobs; -1: the library's default
    notes: list[str] = field(default_factory=list)

    def round_s(self, variant: str) -> float:
        """A pair round: both jobs one after the other plus switches (a guess)."""
        return 2 * self.alone_s * (1.05 if variant == "fast" else 1.15) + 1.5

    def estimate_s(self) -> float:
        first = init_estimate_s(4) + 1.0 + 2 * (self.alone_s + 1.0) + len(self.tqs) * self.round_s("fast") + 2.0
        second = init_estimate_s(2) + len(self.tqs) * self.round_s("demand") + 2.0
        return first + second


def _fit(candidates: list, quick: bool, time_left: float | None, what: str):
    """The first candidate plan (quick ones only with quick) whose estimate fits the time left."""
    if quick:
        candidates = candidates[1:]
    for plan in candidates:
        if time_left is None or plan.estimate_s() <= time_left:
            return plan
    smallest = candidates[-1]
    raise RuntimeError(f"{what}: not enough time: the smallest plan needs ~{smallest.estimate_s():.0f} s, "
                       f"{time_left:.0f} s left")


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


def plan_pair(quick: bool, time_left: float | None, tqs: tuple[int, ...] = (5, 30),
              size: JobSize = PAIR_SIZE, alone_s: float | None = None, steps: int | None = None,
              capacity: int | None = None, idle_release_ms: int = PAIR_IDLE_RELEASE_MS) -> PairPlan:
    """Full: every TQ, 7.5 s jobs; quick: the first TQ only, 6 s jobs; with little time: 5.5 s jobs
    (kept off a multiple of the quantum, so that a job never ends just as its quantum does)."""
    candidates = [PairPlan(tqs, 7.5, size, steps, capacity, idle_release_ms),
                  PairPlan(tqs[:1], 6.0, size, steps, capacity, idle_release_ms),
                  PairPlan(tqs[:1], 5.5, size, steps, capacity, idle_release_ms)]
    if alone_s is not None:
        candidates = [replace(p, alone_s=alone_s) for p in candidates]
    plan = _fit(candidates, quick, time_left, "pair")
    if plan is not candidates[0] and not quick:
        plan.notes.append(f"shortened to fit the time left ({time_left:.0f} s)")
    return plan


# ----------------------------------------------------------------------------- results (pure)

def round_record(rnd: Round, **labels: object) -> dict:
    return {**labels, "start": rnd.start, "makespan_s": rnd.makespan(),
            "jobs": [jobs.summarise_train(r) for r in rnd.results.values()]}


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


def pair_entry(sequential: float | None, fast: dict | None, demand: dict | None) -> dict:
    """One TQ of makespan_pair: makespans of the fast and demand rounds (round records with a "switch" total)
    against the sequential baseline."""
    fast_s = None if fast is None else fast["makespan_s"]
    demand_s = None if demand is None else demand["makespan_s"]
    entry = {
        "fast": fast_s, "demand": demand_s, "sequential": sequential,
        "fast_vs_sequential": stats.ratio(fast_s, sequential),
        "demand_vs_sequential": stats.ratio(demand_s, sequential),
        "switches": None if fast is None else fast["switch"]["count"],
        "switches_demand": None if demand is None else demand["switch"]["count"],
        "fast_switch": None if fast is None else fast["switch"],
        "demand_switch": None if demand is None else demand["switch"],
        "goal": PAIR_GOAL,
    }
    entry["met"] = None if entry["fast_vs_sequential"] is None else entry["fast_vs_sequential"] <= PAIR_GOAL
    if entry["switches"] == 0 and (entry["switches_demand"] or 0) == 0:
        entry["note"] = ("no switch: the first job granted finished inside its quantum, and the other "
                         "ran after it")
    return entry


def pair_results(plan: PairPlan, steps: int, alone: list[dict], rounds: list[dict]) -> dict:
    """makespan_pair from its measurements: `alone` = the two native jobs alone; `rounds` = round records
    labelled variant ("fast" | "demand") and tq, each with its "switch" totals."""
    sequential = sum(s["seconds"] for s in alone) if len(alone) == 2 else None
    table: dict[int, dict] = {}
    for tq in plan.tqs:
        found = {v: next((r for r in rounds if r["variant"] == v and r["tq"] == tq), None)
                 for v in ("fast", "demand")}
        if found["fast"] or found["demand"]:
            table[tq] = pair_entry(sequential, found["fast"], found["demand"])
    everyone = alone + [j for r in rounds for j in r["jobs"]]
    return {"tq": table, "steps": steps, "alone": alone, "rounds": rounds,
            "correctness": jobs.correctness(everyone)}


# ----------------------------------------------------------------------------- measuring

def _job_words(size: JobSize) -> str:
    return (f"bench/job_program.py, MLP {size.width}x{size.depth}, batch {size.batch}, a {size.resident_gib:g} GiB "
            f"working set touched by every step")


def _probe(group: JobGroup, name: str) -> float:
    """Median step time of one job alone, PROBE_STEPS steps."""
    rnd = group.train([name], steps=PROBE_STEPS, timeout=120)
    return stats.median(rnd.results[name]["step_s"])


def _alone(group: JobGroup, names: list[str], steps: int, step_s: float) -> list[dict]:
    found = []
    for name in names:
        rnd = group.train([name], steps=steps, timeout=60 + 6 * steps * step_s)
        found.append(jobs.summarise_train(rnd.results[name]))
        say(PREFIX, f"  {name} alone: {found[-1]['seconds']:.2f} s")
    return found


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


def _pair_round(group: JobGroup, sched, names: list[str], steps: int, timeout: float, **labels) -> dict:
    rnd = group.train(names, steps=steps, timeout=timeout)
    time.sleep(LOG_GRACE_S)
    pids = [group.pid(n) for n in names]
    t0, t1 = rnd.start, max(r["t_end"] for r in rnd.results.values()) + LOG_GRACE_S
    events = sched.events()
    found = schedlog.switches(events, pids, t0, t1)
    rels = schedlog.releases(events, pids, t0, t1)
    record = round_record(rnd, **labels)
    record.update(switches=found, releases=rels, grants=schedlog.grants(events, pids, t0, t1),
                  switch=schedlog.switch_totals(found, rels))
    return record


def measure_pair(lib: Path | None, plan: PairPlan, deadline: Deadline, *, simulate_ms: float | None = None,
                 mode: str = "auto", scheduler_args: tuple[str, ...] = ()) -> dict:
    """makespan_pair. lib None with simulate_ms: a dry run without the library and without a GPU."""
    estimate = plan.size.footprint_estimate()
    problem = gpu_memory.library_total_problem([estimate] * 2)
    if problem:
        raise RuntimeError(problem)
    capacity = plan.capacity or gpu_memory.separating_capacity([estimate, estimate])
    argv = jobs.job_argv(plan.size, simulate_ms)
    rounds: list[dict] = []
    skipped: list[str] = []
    separation: dict = {}
    t0 = time.monotonic()
    with harness.Scheduler(mode=mode, tq=plan.tqs[0],
                           extra_args=("--gpu-memory", str(capacity), *scheduler_args)) as sched:
        def lib_env(prefetch: str) -> dict[str, str]:
            idle = {"NVSHARE_IDLE_RELEASE_MS": plan.idle_release_ms} if plan.idle_release_ms >= 0 else {}
            return jobs.library_env(harness, lib, sched.socket, capacity, NVSHARE_PREFETCH=prefetch, **idle)

        def pair_rounds(group: JobGroup, names: list[str], variant: str, still_to_come_s: float) -> None:
            """Every TQ's round of one variant; the first always, the others while time allows
            (keeping still_to_come_s for what must run after them)."""
            for i, tq in enumerate(plan.tqs):
                if i and not deadline.allows(plan.round_s(variant) + still_to_come_s + 3):
                    skipped.append(f"{variant} at TQ {tq} s: time limit")
                    continue
                gpu_memory.control(sched.socket, "set_tq", seconds=int(tq))
                record = _pair_round(group, sched, names, steps, timeout, variant=variant, tq=tq)
                rounds.append(record)
                say(PREFIX, f"  {variant} pair at TQ {tq} s: makespan {record['makespan_s']:.2f} s, "
                            f"{record['switch']['count']} switch(es)")

        with JobGroup(PREFIX) as group:
            group.start("nativeA", argv, jobs.native_env(harness))
            group.start("nativeB", argv, jobs.native_env(harness))
            group.start("fastA", argv, lib_env("wait"))
            group.start("fastB", argv, lib_env("wait"))
            say(PREFIX, f"pair: starting the native and the fast pair (~{plan.estimate_s():.0f} s planned)")
            group.wait_ready(READY_TIMEOUT_S)
            say(PREFIX, f"  all ready after {time.monotonic() - t0:.1f} s")
            step_s = _probe(group, "nativeA")
            steps = plan.steps or steps_for(plan.alone_s, step_s)
            timeout = 90 + 8 * steps * step_s
            say(PREFIX, f"  probe: {step_s * 1e3:.3f} ms/step -> {steps} steps a job")
            separation = gpu_memory.ensure_separating(sched.socket, [group.pid("fastA"), group.pid("fastB")],
                                                capacity, PREFIX)
            capacity = separation["capacity"]
            alone = _alone(group, ["nativeA", "nativeB"], steps, step_s)
            pair_rounds(group, ["fastA", "fastB"], "fast", init_estimate_s(2) + plan.round_s("demand") + 2)
        with JobGroup(PREFIX) as group:
            group.start("demandA", argv, lib_env("off"))
            group.start("demandB", argv, lib_env("off"))
            say(PREFIX, "pair: starting the demand pair")
            group.wait_ready(READY_TIMEOUT_S)
            separation["demand"] = gpu_memory.ensure_separating(
                sched.socket, [group.pid("demandA"), group.pid("demandB")], capacity, PREFIX)
            pair_rounds(group, ["demandA", "demandB"], "demand", 0.0)
    result = pair_results(plan, steps, alone, rounds)
    result.update(params={"tqs": list(plan.tqs), "alone_s": plan.alone_s, "steps": steps,
                          "size": plan.size.as_dict(), "capacity": capacity, "mode": mode,
                          "idle_release_ms": plan.idle_release_ms,
                          "simulated": simulate_ms is not None},
                  probe_step_ms=step_s * 1e3, separation=separation, notes=plan.notes, skipped=skipped,
                  method=(f"Jobs: {_job_words(plan.size)}; {steps} steps each (~{steps * step_s:.1f} s alone at the "
                          f"probe's {step_s * 1e3:.2f} ms/step). Scheduler mode {mode}, virtual capacity "
                          f"{capacity / GIB:.2f} GiB: one job fits, two do not. Sequential: the two jobs alone "
                          f"without the library, one after the other. Fast: NVSHARE_PREFETCH=wait; demand: "
                          f"NVSHARE_PREFETCH=off; both evict in bulk when they are dropped. "
                          + (f"NVSHARE_IDLE_RELEASE_MS={plan.idle_release_ms} for the pair's jobs (they stay "
                             f"alive between rounds; a finished job hands the GPU on about as soon as an exiting "
                             f"one would)." if plan.idle_release_ms >= 0 else "")))
    return result


# ----------------------------------------------------------------------------- entry points

def run_fitting(quick: bool = False, time_left: float | None = None, *, counts: tuple[int, ...] = (2, 4),
                size: JobSize = FIT_SIZE, alone_s: float | None = None, reps: int | None = None,
                steps: int | None = None, mode: str = "auto", dry_run: bool = False) -> dict:
    """makespan_fit with the plan that fits time_left (seconds). dry_run: simulated jobs, no library, no GPU."""
    t0 = time.monotonic()
    plan = plan_fitting(quick, time_left, counts, size, alone_s, reps, steps)
    if not dry_run:
        require_safe_gpu(strict=False)
    result = measure_fitting(None if dry_run else harness.library_path(), plan, Deadline(time_left),
                             simulate_ms=SIMULATED_STEP_MS if dry_run else None, mode=mode,
                             scheduler_args=("--no-nvml",) if dry_run else ())
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["quick"] = quick
    print_summary(result, None)
    return result


def run_pair(quick: bool = False, time_left: float | None = None, *, tqs: tuple[int, ...] = (5, 30),
             size: JobSize = PAIR_SIZE, alone_s: float | None = None, steps: int | None = None,
             capacity: int | None = None, idle_release_ms: int = PAIR_IDLE_RELEASE_MS, mode: str = "auto",
             dry_run: bool = False) -> dict:
    """makespan_pair with the plan that fits time_left (seconds). dry_run: simulated jobs, no library, no GPU."""
    t0 = time.monotonic()
    plan = plan_pair(quick, time_left, tqs, size, alone_s, steps, capacity, idle_release_ms)
    if not dry_run:
        require_safe_gpu(strict=False)
    result = measure_pair(None if dry_run else harness.library_path(), plan, Deadline(time_left),
                          simulate_ms=SIMULATED_STEP_MS if dry_run else None, mode=mode,
                          scheduler_args=("--no-nvml",) if dry_run else ())
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["quick"] = quick
    print_summary(None, result)
    return result


def run(quick: bool = False, time_left: float | None = None) -> dict:
    """makespan_fit then makespan_pair; the pair gets what the first left of time_left. A failure of one is recorded, the other runs."""
    deadline = Deadline(time_left)
    out: dict = {}
    for key, fn, share in (("fitting", run_fitting, 0.45), ("pair", run_pair, 1.0)):
        left = deadline.left()
        try:
            out[key] = fn(quick, None if left is None else left * share)
        except Exception as e:  # one broken half must not lose the other
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    return out


def print_summary(fitting: dict | None, pair: dict | None) -> None:
    def fmt(v: float | None, digits: int = 2) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    for count, row in ((fitting or {}).get("jobs") or {}).items():
        say(PREFIX, f"{count} fitting jobs: auto {fmt(row['auto'])} s, concurrent {fmt(row['concurrent'])} s, "
                    f"sequential {fmt(row['sequential'])} s -> auto/concurrent "
                    f"{fmt(row['auto_vs_concurrent'], 3)} (goal <= {FIT_GOAL}), auto/sequential "
                    f"{fmt(row['auto_vs_sequential'], 3)}")
    for tq, row in ((pair or {}).get("tq") or {}).items():
        say(PREFIX, f"pair at TQ {tq} s: fast {fmt(row['fast'])} s ({fmt(row['fast_vs_sequential'], 3)}x), "
                    f"demand {fmt(row['demand'])} s ({fmt(row['demand_vs_sequential'], 3)}x), sequential "
                    f"{fmt(row['sequential'])} s; switches {row['switches']} / {row['switches_demand']}"
                    + (f" ({row['note']})" if row.get("note") else ""))


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1 or max(counts) > 8:
        raise argparse.ArgumentTypeError(f"invalid --jobs {text!r}: comma-separated counts from 1 to 8")
    return counts


def _tqs(text: str) -> tuple[int, ...]:
    try:
        tqs = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        tqs = ()
    if not tqs or min(tqs) < 1:
        raise argparse.ArgumentTypeError(f"invalid --tq {text!r}: comma-separated whole seconds >= 1")
    return tqs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=_counts, help="makespan_fit: job counts, e.g. 2,4 (without --pair: makespan_fit only)")
    p.add_argument("--pair", action="store_true", help="makespan_pair (without --jobs: makespan_pair only)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions, shorter jobs")
    p.add_argument("--time-left", type=positive(float), metavar="SECONDS", help="fit the plan into this")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the results here")
    p.add_argument("--alone-s", type=positive(float), help="seconds a job takes alone (sets the steps)")
    p.add_argument("--steps", type=positive(int), help="steps a job (instead of --alone-s)")
    p.add_argument("--reps", type=positive(int), help="makespan_fit: repetitions of concurrent and auto")
    p.add_argument("--width", type=positive(int), default=FIT_SIZE.width)
    p.add_argument("--depth", type=positive(int), default=FIT_SIZE.depth)
    p.add_argument("--batch", type=positive(int), default=FIT_SIZE.batch)
    p.add_argument("--resident-gib", type=positive(float), default=FIT_SIZE.resident_gib,
                   help="makespan_fit: working set of each job, GiB")
    p.add_argument("--pair-resident-gib", type=positive(float), default=PAIR_SIZE.resident_gib,
                   help="makespan_pair: working set of each job, GiB")
    p.add_argument("--tq", type=_tqs, default=(5, 30), help="makespan_pair: quanta, whole seconds (default 5,30)")
    p.add_argument("--capacity-gib", type=positive(float),
                   help="makespan_pair: the scheduler's virtual capacity (default: halfway between one job and two)")
    p.add_argument("--pair-idle-release-ms", type=int, default=PAIR_IDLE_RELEASE_MS,
                   help=f"makespan_pair: NVSHARE_IDLE_RELEASE_MS of the pair's jobs (default {PAIR_IDLE_RELEASE_MS}; "
                        "-1: the library's default)")
    p.add_argument("--mode", choices=["auto", "serial", "off"], default="auto",
                   help="the scheduler's mode for the runs under the library (default auto)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: simulated jobs, no library (checks the orchestration only)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    do_fitting = args.jobs is not None or not args.pair
    do_pair = args.pair or args.jobs is None
    fit_size = JobSize(args.width, args.depth, args.batch, args.resident_gib)
    pair_size = JobSize(args.width, args.depth, args.batch, args.pair_resident_gib)
    deadline = Deadline(args.time_left)
    results: dict = {}
    if do_fitting:
        left = deadline.left()
        results["fitting"] = run_fitting(
            args.quick, None if left is None or not do_pair else left * 0.45, counts=args.jobs or (2, 4),
            size=fit_size, alone_s=args.alone_s, reps=args.reps, steps=args.steps, mode=args.mode,
            dry_run=args.dry_run)
    if do_pair:
        capacity = None if args.capacity_gib is None else int(args.capacity_gib * GIB)
        results["pair"] = run_pair(args.quick, deadline.left(), tqs=args.tq, size=pair_size,
                                   alone_s=args.alone_s, steps=args.steps, capacity=capacity,
                                   idle_release_ms=max(-1, args.pair_idle_release_ms), mode=args.mode,
                                   dry_run=args.dry_run)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
