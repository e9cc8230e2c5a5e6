#!/usr/bin/env python3
"""Training step time of a resident PyTorch job, natively and under libnvshare.so.

Runs examples/pytorch_train.py (through bench/train_steps.py: every configuration in one process,
one synchronise per step) natively and under the library (scheduler in mode `off`: one job alone on
the GPU, its working set resident in GPU memory), --reps times each, alternating which side goes
first, for three sizes:
- small: launch-bound (tiny convolutions): the library's per-launch cost shows the most;
- medium: a few ms per step;
- large: compute-bound, ~19 ms per step on an H200: what a typical job would see.
Each process gives the median step time after warm-up of each configuration (a few hundred steps).
Repetition i of the two sides ran back to back, so their ratio (library / native) is little affected
by drift; the result is the median of these per-pair ratios, with their min and max, next to each
side's median.

    python3 bench/train_overhead.py [--reps 6] [--scale 1.0] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import BENCH, alternating, harness, require_safe_gpu
from stats import median, ratio

# name -> (arguments of examples/pytorch_train.py, measured steps per process). On the H200 VM: small
# 4.2 ms/step, medium 5.7 ms/step, large 18.8 ms/step (p10-p90 within 2%, so 80 steps give a firm
# median). A process takes about 15 s, 10 of them fixed: importing PyTorch (4 s), the first steps'
# set-up (CUDA, cuBLAS/cuDNN, lazy imports; ~5 s) and exit.
CONFIGS: dict[str, tuple[list[str], int]] = {
    "small": (["--width", "32", "--batch-size", "64", "--image-size", "32"], 150),
    "medium": (["--width", "96", "--batch-size", "128", "--image-size", "64"], 120),
    # The GPU's memory in use peaks at 5.2 GiB, the CUDA context included (GPU safety: a few GiB).
    "large": (["--width", "256", "--batch-size", "256", "--image-size", "64"], 80),
}


def run_configs(env: dict[str, str], spec: dict, out: Path) -> dict:
    argv = harness.python_cmd(BENCH / "train_steps.py", "--spec", json.dumps(spec), "--json-out", out)
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


if __name__ == "__main__":
    raise SystemExit(main())
