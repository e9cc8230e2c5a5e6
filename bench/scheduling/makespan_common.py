"""What the makespan benchmarks share (bench/scheduling/makespan.py runs them): the jobs' sizes and goals, the
plans' estimates, a job's probe and its run alone, and how a measurement is run and summarised.
makespan_fit.py and makespan_pair.py import this; makespan.py imports them."""

from __future__ import annotations

import time

from bench.scheduling import jobs
from bench.core import stats
from bench.core.common import harness, require_safe_gpu, say
from bench.scheduling.job_program import GIB
from bench.scheduling.jobs import Deadline, JobGroup, JobSize, Round

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


# ----------------------------------------------------------------------------- results (pure)

def round_record(rnd: Round, **labels: object) -> dict:
    return {**labels, "start": rnd.start, "makespan_s": rnd.makespan(),
            "jobs": [jobs.summarise_train(r) for r in rnd.results.values()]}


# ----------------------------------------------------------------------------- measuring

def _job_words(size: JobSize) -> str:
    return (f"bench/scheduling/job_program.py, MLP {size.width}x{size.depth}, batch {size.batch}, a {size.resident_gib:g} GiB "
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



def measured(measure, plan, t0: float, time_left: float | None, quick: bool, mode: str, dry_run: bool,
             which: str) -> dict:
    """measure(lib, plan, deadline, ...) after the GPU safety check, with its time since t0, and its
    summary printed (which: "fitting" or "pair"). dry_run: simulated jobs, no library, no GPU."""
    if not dry_run:
        require_safe_gpu(strict=False)
    result = measure(None if dry_run else harness.library_path(), plan, Deadline(time_left),
                     simulate_ms=SIMULATED_STEP_MS if dry_run else None, mode=mode,
                     scheduler_args=("--no-nvml",) if dry_run else ())
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["quick"] = quick
    print_summary(**{"fitting": None, "pair": None, which: result})
    return result


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
