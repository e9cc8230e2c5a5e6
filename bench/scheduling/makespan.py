#!/usr/bin/env python3
"""Makespans of training jobs sharing one GPU: jobs whose memory fits (the makespan_fit benchmark), and
a pair that does not (makespan_pair).

Every job is bench/scheduling/job_program.py (a deterministic PyTorch MLP plus a resident working set touched by every
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
measurement (bench/scheduling/idle_release.py), and the library does not count a prefetch or work in flight as idle. Budget ~120 s;
quick: TQ 5 s only, 6 s jobs, ~75 s.

GPU safety: nothing starts when the GPU has less than 48 GiB free; the processes under the library
allocate at most 24 GiB together (checked from the sizes before anything starts); every process
started is ended when the benchmark ends, also on errors and timeouts.

Results (JSON-serialisable; times in seconds unless named _ms; integer keys become strings in JSON):

makespan_fit.run_fitting(quick, time_left) ->
  {"jobs": {2: {"auto": s, "concurrent": s, "sequential": s, "auto_vs_concurrent": r,
                "auto_vs_sequential": r, "concurrent_vs_sequential": r,
                "auto_reps": [s..], "concurrent_reps": [s..], "pair_ratios": [auto/concurrent per rep],
                "goal": 1.02, "met": bool},
            4: {...}},
   "params": {"counts", "reps", "alone_s", "steps", "size": {...}, "capacity", "mode", "tq"},
   "probe_step_ms", "alone": [job summaries], "rounds": [{"way", "count", "rep", "makespan_s",
   "jobs": [job summaries]}], "fit": {what the scheduler saw: footprints, budget, fit},
   "correctness": {"final_losses", "working_set_bad_pids", "ok"}, "notes": [...], "seconds"}
makespan_pair.run_pair(quick, time_left) ->
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

    python3 -m bench.scheduling.makespan [--jobs 2,4] [--pair] [--quick] [--json out.json]
    python3 -m bench.scheduling.makespan --dry-run --quick      # no GPU: simulated jobs, checks the plumbing
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.scheduling import makespan_fit
from bench.scheduling import makespan_pair
from bench.core.argtypes import positive
from bench.scheduling.job_program import GIB
from bench.scheduling.jobs import Deadline, JobSize
from bench.scheduling.makespan_common import FIT_SIZE, PAIR_IDLE_RELEASE_MS, PAIR_SIZE

def run(quick: bool = False, time_left: float | None = None) -> dict:
    """makespan_fit then makespan_pair; the pair gets what the first left of time_left. A failure of one is recorded, the other runs."""
    deadline = Deadline(time_left)
    out: dict = {}
    for key, fn, share in (("fitting", makespan_fit.run_fitting, 0.45), ("pair", makespan_pair.run_pair, 1.0)):
        left = deadline.left()
        try:
            out[key] = fn(quick, None if left is None else left * share)
        except Exception as e:  # one broken half must not lose the other
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    return out


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
    from bench.scheduling import makespan_fit
    from bench.scheduling import makespan_pair

    args = build_parser().parse_args(argv)
    do_fitting = args.jobs is not None or not args.pair
    do_pair = args.pair or args.jobs is None
    fit_size = JobSize(args.width, args.depth, args.batch, args.resident_gib)
    pair_size = JobSize(args.width, args.depth, args.batch, args.pair_resident_gib)
    deadline = Deadline(args.time_left)
    results: dict = {}
    if do_fitting:
        left = deadline.left()
        results["fitting"] = makespan_fit.run_fitting(
            args.quick, None if left is None or not do_pair else left * 0.45, counts=args.jobs or (2, 4),
            size=fit_size, alone_s=args.alone_s, reps=args.reps, steps=args.steps, mode=args.mode,
            dry_run=args.dry_run)
    if do_pair:
        capacity = None if args.capacity_gib is None else int(args.capacity_gib * GIB)
        results["pair"] = makespan_pair.run_pair(args.quick, deadline.left(), tqs=args.tq, size=pair_size,
                                   alone_s=args.alone_s, steps=args.steps, capacity=capacity,
                                   idle_release_ms=max(-1, args.pair_idle_release_ms), mode=args.mode,
                                   dry_run=args.dry_run)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
