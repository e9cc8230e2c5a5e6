#!/usr/bin/env python3
"""Training step time of a resident PyTorch job, natively and under libnvshare.so.

Runs examples/pytorch_train.py (--time: one synchronise per step) natively and under the library
(scheduler in mode `off`: one job alone on the GPU, its working set resident in GPU memory),
alternating which goes first, --reps times each, for two sizes:
- small: launch-bound (tiny convolutions): the library's per-launch cost shows the most;
- medium: compute-bound: what a typical job would see.
Reports the median step time after warm-up of each side and their ratio (library / native).

    python3 bench/train_overhead.py [--reps 3] [--steps 150] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import REPO, alternating, harness, median, ratio, require_safe_gpu

CONFIGS = {
    "small": ["--width", "32", "--batch-size", "64", "--image-size", "32"],
    "medium": ["--width", "96", "--batch-size", "128", "--image-size", "64"],
}


def median_step_s(env: dict[str, str], config: list[str], steps: int, warmup: int, out: Path) -> float:
    argv = harness.python_cmd(REPO / "examples" / "pytorch_train.py", "--steps", steps, "--time",
                              "--json-out", out, *config)
    harness.run(argv, env, timeout=300).check()
    times = json.loads(out.read_text())["step_times_s"][warmup:]
    return median(times)


def measure(lib: Path, sched, reps: int = 3, steps: int = 150, warmup: int = 30) -> dict:
    envs = {"native": harness.native_env(), "library": harness.library_env(lib, sched.socket)}
    results = {}
    with tempfile.TemporaryDirectory(prefix="nvs-bench-") as tmp:
        for name, config in CONFIGS.items():
            per_rep: dict[str, list[float]] = {"native": [], "library": []}
            for rep, side in alternating(reps):
                out = Path(tmp) / f"{name}-{side}-{rep}.json"
                per_rep[side].append(median_step_s(envs[side], config, steps, warmup, out))
            native_ms, ours_ms = median(per_rep["native"]) * 1e3, median(per_rep["library"]) * 1e3
            results[name] = {"args": config, "native_ms": native_ms, "library_ms": ours_ms,
                             "ratio": ratio(ours_ms, native_ms),
                             "reps_ms": {s: [v * 1e3 for v in per_rep[s]] for s in per_rep}}
    return {"reps": reps, "steps": steps, "warmup_steps": warmup, "configs": results}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    require_safe_gpu()
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, args.reps, args.steps)
    for name, row in result["configs"].items():
        print(f"{name:8s} native {row['native_ms']:8.3f} ms  library {row['library_ms']:8.3f} ms  "
              f"ratio {row['ratio']:.4f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
