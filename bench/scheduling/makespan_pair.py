"""Two jobs that do not fit: the makespan of two training jobs whose working sets do not fit together in
the scheduler's virtual capacity, at two quanta, with fast switches (bulk eviction and prefetch) and
with demand faults, against the two run one after the other.

The method, the parameters and the result's shape are described in bench/scheduling/makespan.py, which also holds
what both makespan benchmarks share and their command line (`python3 -m bench.scheduling.makespan --pair`)."""

from __future__ import annotations

import json

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.core import gpu_memory
from bench.scheduling import jobs
from bench.core import schedlog
from bench.core import stats
from bench.core.common import harness, say
from bench.scheduling.job_program import GIB
from bench.scheduling.jobs import Deadline, JobGroup, JobSize
from bench.scheduling.makespan_common import (LOG_GRACE_S, PAIR_GOAL, PAIR_IDLE_RELEASE_MS, PAIR_SIZE, PREFIX, READY_TIMEOUT_S, _alone,
                      _fit, _job_words, _probe, init_estimate_s, measured, round_record, steps_for)
from bench.core.render import (dig, error_of, error_row, extra_text, f, goal_row, num, numeric_items, seconds, table_bars,
                    yes_no)

NAME = "makespan_pair"
TITLE = "Two jobs that do not fit: quantum, fast switches, demand faults"
SHARE, MIN_S, GPU = 130, 50, True
RERUN = "python3 -m bench.scheduling.makespan --pair"
PLOTS = {"makespan-pair.png": "makespans of two jobs that do not fit"}
PAIR_TQ = 5  # the quantum the goal is judged at
NVSHARE_PAIR_RATIO = 1.94  # nvshare's two jobs at TQ 5 s vs one after the other (its published figure)


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
                  method=_method(plan, steps, step_s, mode, capacity))
    return result


def _method(plan: PairPlan, steps: int, step_s: float, mode: str, capacity: int) -> str:
    return (f"Jobs: {_job_words(plan.size)}; {steps} steps each (~{steps * step_s:.1f} s alone at the "
            f"probe's {step_s * 1e3:.2f} ms/step). Scheduler mode {mode}, virtual capacity "
            f"{capacity / GIB:.2f} GiB: one job fits, two do not. Sequential: the two jobs alone "
            f"without the library, one after the other. Fast: NVSHARE_PREFETCH=wait; demand: "
            f"NVSHARE_PREFETCH=off; both evict in bulk when they are dropped. "
            + (f"NVSHARE_IDLE_RELEASE_MS={plan.idle_release_ms} for the pair's jobs (they stay "
               f"alive between rounds; a finished job hands the GPU on about as soon as an exiting "
               f"one would)." if plan.idle_release_ms >= 0 else ""))


def run_pair(quick: bool = False, time_left: float | None = None, *, tqs: tuple[int, ...] = (5, 30),
             size: JobSize = PAIR_SIZE, alone_s: float | None = None, steps: int | None = None,
             capacity: int | None = None, idle_release_ms: int = PAIR_IDLE_RELEASE_MS, mode: str = "auto",
             dry_run: bool = False) -> dict:
    """makespan_pair with the plan that fits time_left (seconds). dry_run: simulated jobs, no library, no GPU."""
    t0 = time.monotonic()
    plan = plan_pair(quick, time_left, tqs, size, alone_s, steps, capacity, idle_release_ms)
    return measured(measure_pair, plan, t0, time_left, quick, mode, dry_run, "pair")


run = run_pair  # the suite's entry point: run(quick, time_left)


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row(f"two jobs that do not fit, TQ {PAIR_TQ} s", error_of(section))]
    row = dig(section, "tq", PAIR_TQ)
    if not isinstance(row, dict):
        return [error_row(f"two jobs that do not fit, TQ {PAIR_TQ} s", f"no TQ {PAIR_TQ} s in the result")]
    r = num(row.get("fast_vs_sequential"))
    rows = [goal_row(f"two jobs that do not fit, TQ {PAIR_TQ} s, fast switches: makespan vs one after the "
                 f"other (nvshare: {NVSHARE_PAIR_RATIO}x)", f"{f(row.get('fast'), 2)} s",
                 f"{f(row.get('sequential'), 2)} s (sequential)", f"**{f(r, 3)}x**", f"≤ {PAIR_GOAL:.2f}x",
                 None if r is None else r <= PAIR_GOAL)]
    d = num(row.get("demand_vs_sequential"))
    if d is not None:
        rows.append(goal_row("the same with demand faults (NVSHARE_PREFETCH=off), for comparison",
                         f"{f(row.get('demand'), 2)} s", f"{f(row.get('sequential'), 2)} s (sequential)",
                         f"{f(d, 3)}x", "—", None))
    return rows


def section(s: dict) -> str:
    lines = ["| TQ s | one after the other s | fast switches s | demand faults s | **fast / sequential** | "
             "demand / sequential | switches | fast switch: handoff / evict / prefetch ms | ≤ 1.10x (TQ 5 s) |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    notes = []
    for tq, row in numeric_items(s.get("tq")):
        fast = dig(row, "fast_switch") or {}
        detail = (f"{f(fast.get('handoff_ms'))} / {f(fast.get('evict_ms'))} / {f(fast.get('prefetch_ms'))}"
                  if isinstance(fast, dict) else "—")
        if isinstance(dig(row, "note"), str):
            notes.append(f"- TQ {tq} s: {row['note']}")
        r = num(dig(row, "fast_vs_sequential"))
        goal = yes_no(None if r is None else r <= PAIR_GOAL) if tq in (str(PAIR_TQ), f"{PAIR_TQ:.1f}") else "—"
        switches = dig(row, "switches")
        switches = json.dumps(switches, separators=(",", ":")) if isinstance(switches, (dict, list)) else (
            "—" if switches is None else str(switches))
        lines.append(f"| {tq} | {seconds(dig(row, 'sequential'))} | {seconds(dig(row, 'fast'))} | "
                     f"{seconds(dig(row, 'demand'))} | **{f(r, 3)}x** | {f(dig(row, 'demand_vs_sequential'), 3)}x | "
                     f"{switches} | {detail} | {goal} |")
    if len(lines) == 2:
        lines.append("| — | not measured: no 'tq' in the result | | | | | | | |")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + (
        "\n\nTwo jobs whose resident working sets do not fit together in the scheduler's virtual capacity "
        "(`--gpu-memory`), mode auto with an explicit quantum; fast switches = NVSHARE_PREFETCH=wait (bulk "
        "eviction, bulk prefetch), demand = NVSHARE_PREFETCH=off (the eviction on the handoff is real too; the "
        "data comes back by page faults); against the two jobs run one after the other in the same run. "
        f"Switches: DROP_LOCK lines in the scheduler's log. nvshare took {NVSHARE_PAIR_RATIO}x at TQ 5 s. A "
        "quantum longer than a job gives no switch: that is the result, not a failure.\n" + extra_text(s))


def plot(s: dict, plt) -> dict:
    ways = (("one after the other", "sequential"), ("fast switches", "fast"), ("demand faults", "demand"))
    return {"makespan-pair.png": table_bars(plt, s.get("tq"), ways, "TQ {} s", "makespan s",
                                            "two jobs that do not fit")}
