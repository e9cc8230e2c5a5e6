#!/usr/bin/env python3
"""Training step time of a resident PyTorch job, natively and under libnvshare.so.

Runs examples/pytorch_train.py (through bench/launch/train_steps.py: every configuration in one process,
one synchronise per step) natively and under the library (scheduler in mode `off`: one job alone on
the GPU, its working set resident in GPU memory), --reps times each, alternating which side goes
first, for three sizes:
- small: launch-bound (tiny convolutions): the library's per-launch cost shows the most;
- medium: a few ms per step;
- large: compute-bound: what a typical job would see.
Each process gives the median step time after warm-up of each configuration (a few hundred steps).
Repetition i of the two sides ran back to back, so their ratio (library / native) is little affected
by drift; the result is the median of these per-pair ratios, with their min and max, next to each
side's median.

    python3 -m bench.launch.train_overhead [--reps 6] [--scale 1.0] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import contextmanager
from pathlib import Path

from bench.core.common import BENCH, alternating, harness, require_safe_gpu
from bench.core.stats import median, ratio
from bench.core.render import dig, error_of, error_row, f, goal_row, num

NAME = "train_overhead"  # its key in the results
TITLE = "Resident training step time"
SHARE, MIN_S, GPU = 60, 30, True  # seconds of the suite's default budget; skipped below MIN_S; needs the GPU
RERUN = "python3 -m bench.run_all --only train_overhead"
GOAL_RATIO = 1.01  # resident training under the library: at most 1% slower than native

# name -> (arguments of examples/pytorch_train.py, measured steps per process). The step times and
# their spread are in docs/benchmarks.md; the step counts give a firm median at each size. Most of a
# process's time is fixed: importing PyTorch, the first steps' set-up (CUDA, cuBLAS/cuDNN, lazy
# imports) and exit.
CONFIGS: dict[str, tuple[list[str], int]] = {
    "small": (["--width", "32", "--batch-size", "64", "--image-size", "32"], 150),
    "medium": (["--width", "96", "--batch-size", "128", "--image-size", "64"], 120),
    # The GPU's memory in use peaks at 5.2 GiB, the CUDA context included (GPU safety: a few GiB).
    "large": (["--width", "256", "--batch-size", "256", "--image-size", "64"], 80),
}


def run_configs(env: dict[str, str], spec: dict, out: Path) -> dict:
    argv = harness.python_cmd(BENCH / "launch" / "train_steps.py", "--spec", json.dumps(spec), "--json-out", out)
    harness.run(argv, env, timeout=300).check()
    return json.loads(out.read_text())


def measure(lib: Path, sched, reps: int = 6, scale: float = 1.0) -> dict:
    # The same hash seed on both sides: one source of process-to-process variation fewer.
    envs = {"native": harness.native_env(PYTHONHASHSEED=0),
            "library": harness.library_env(lib, sched.socket, PYTHONHASHSEED=0)}
    spec = {name: {"args": args, "steps": max(20, round(steps * scale))}
            for name, (args, steps) in CONFIGS.items()}
    runs: dict[str, list[dict]] = {"native": [], "library": []}
    with tempfile.TemporaryDirectory(prefix="nvs-bench-") as tmp:
        for rep, side in alternating(reps):
            runs[side].append(run_configs(envs[side], spec, Path(tmp) / f"{side}-{rep}.json"))
    results = {}
    for name, (args, _) in CONFIGS.items():
        ms = {side: [run[name]["median_s"] * 1e3 for run in runs[side]] for side in runs}
        pairs = [ratio(lib_ms, nat_ms) for nat_ms, lib_ms in zip(ms["native"], ms["library"])]
        native_ms, ours_ms = median(ms["native"]), median(ms["library"])
        results[name] = {
            "args": args, "native_ms": native_ms, "library_ms": ours_ms,
            "ratio": median(pairs), "ratio_min": min(pairs), "ratio_max": max(pairs), "pair_ratios": pairs,
            "ratio_of_medians": ratio(ours_ms, native_ms), "reps_ms": ms,
            "steps": {side: [run[name]["steps"] for run in runs[side]] for side in runs},
            "p90_ms": {side: median([run[name]["p90_s"] * 1e3 for run in runs[side]]) for side in runs},
            "wall_s": {side: [run[name].get("wall_s") for run in runs[side]] for side in runs},
        }
    warmup = runs["native"][0][next(iter(CONFIGS))]["warmup_steps"]
    return {"reps": reps, "scale": scale, "warmup_steps": warmup, "configs": results}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=6, help="processes of each side")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies each configuration's steps")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    if args.reps < 1 or args.scale <= 0:
        p.error("--reps must be >= 1 and --scale > 0")
    require_safe_gpu()
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, args.reps, args.scale)
    for name, row in result["configs"].items():
        print(f"{name:8s} native {row['native_ms']:8.3f} ms  library {row['library_ms']:8.3f} ms  "
              f"ratio {row['ratio']:.4f} (pairs {row['ratio_min']:.4f}..{row['ratio_max']:.4f})")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


# ----------------------------------------------------------------------------- in the suite

@contextmanager
def _only_configs(names: list[str]):
    """measure() runs every entry of CONFIGS: restrict them for one call."""
    global CONFIGS
    saved = CONFIGS
    CONFIGS = {k: v for k, v in saved.items() if k in names}
    try:
        yield
    finally:
        CONFIGS = saved


def train_reps(quick: bool, time_left: float | None) -> int:
    """Pairs of processes (native, library): ~25 s a pair at the large size (a process ~12 s)."""
    if quick:
        return 2
    if time_left is None:
        return 3
    return max(1, min(3, int(time_left // 25)))


def run(quick: bool, time_left: float | None) -> dict:
    """The suite's form: the compute-bound size only, 2-3 back-to-back pairs."""
    reps = train_reps(quick, time_left)
    with harness.Scheduler(mode="off") as sched, _only_configs(["large"]):
        result = measure(harness.library_path(), sched, reps=reps, scale=1.0)
    result["parameters"] = {"config": "large (compute-bound)", "pairs": reps, "scheduler_mode": "off"}
    return result


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("resident training step time", error_of(section))]
    rows = []
    for name, row in (dig(section, "configs") or {}).items():
        r = num(row.get("ratio"))
        rows.append(goal_row(f"resident training step, {name}",
                         f"{f(row.get('library_ms'), 2)} ms/step", f"{f(row.get('native_ms'), 2)} ms/step (native)",
                         f"**{f(r, 4)}x** (pairs {f(row.get('ratio_min'), 4)}–{f(row.get('ratio_max'), 4)})",
                         f"≤ {GOAL_RATIO}x", _train_verdict(row)))
    return rows


def _train_verdict(row: dict) -> bool | None:
    """None (not resolved) when the pairs spread more than twice the goal's margin."""
    r, lo, hi = num(row.get("ratio")), num(row.get("ratio_min")), num(row.get("ratio_max"))
    if r is None:
        return None
    if lo is not None and hi is not None and (hi - lo) / 2 > 2 * (GOAL_RATIO - 1):
        return None
    return r <= GOAL_RATIO


def section(s: dict) -> str:
    lines = ["| job | native ms/step | under libnvshare.so ms/step | **ratio** (median of pairs) | "
             "pair ratios min–max | pairs |", "|---|---:|---:|---:|---:|---:|"]
    configs = s.get("configs") or {}
    sizes = "the compute-bound size only" if list(configs) == ["large"] else f"{len(configs)} sizes"
    for name, row in configs.items():
        lines.append(f"| {name} (`{' '.join(row.get('args') or [])}`) | {f(row.get('native_ms'), 3)} | "
                     f"{f(row.get('library_ms'), 3)} | **{f(row.get('ratio'), 4)}** | "
                     f"{f(row.get('ratio_min'), 4)}–{f(row.get('ratio_max'), 4)} | "
                     f"{len(row.get('pair_ratios') or [])} |")
    return "\n".join(lines) + (
        f"\n\nexamples/pytorch_train.py at {sizes} (bench/launch/train_steps.py), processes natively "
        "and under the library alternately, scheduler in mode `off` (one job, resident). Per process: the "
        f"median step time after {s.get('warmup_steps', '?')} warm-up steps; ratio per back-to-back pair, "
        "median and range. The library only adds work: a ratio below 1.00 is noise.\n")


if __name__ == "__main__":
    raise SystemExit(main())
