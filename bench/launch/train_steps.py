#!/usr/bin/env python3
"""Step times of examples/pytorch_train.py for several configurations, in one process.

bench/launch/train_overhead.py runs this natively and under libnvshare.so. One process covers every
configuration, so starting Python, PyTorch and CUDA (seconds) is paid once per
repetition, not once per configuration.

For each configuration the example's own train() runs WARMUP_STEPS + "steps" steps, each ending with a
synchronise (--time); the warm-up steps (kernel loading, cuDNN set-up, the allocator filling its
cache, building the batches) are dropped, and the median of the others is the result.

    python3 -m bench.launch.train_steps --spec '{"small": {"args": ["--width", "32"], "steps": 250}}' \\
        [--json-out FILE]

Writes {name: {"steps", "warmup_steps", "median_s", "p10_s", "p90_s", "wall_s"}}.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import pytorch_train  # noqa: E402  (first: it sets CUBLAS_WORKSPACE_CONFIG before CUDA starts)
import torch  # noqa: E402
from bench.core.stats import median, percentile  # noqa: E402  (bench/, the script's directory)

WARMUP_STEPS = 20


def step_times(args: list[str], steps: int) -> list[float]:
    result = pytorch_train.train(pytorch_train.parse_args([*args, "--steps", str(steps), "--time"]))
    return result["step_times_s"]


def one_config(args: list[str], steps: int) -> dict:
    t0 = time.monotonic()
    times = sorted(step_times(args, WARMUP_STEPS + steps)[WARMUP_STEPS:])
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next configuration starts from an empty cache too
    return {"steps": steps, "warmup_steps": WARMUP_STEPS, "median_s": median(times),
            "p10_s": percentile(times, 10), "p90_s": percentile(times, 90),
            "wall_s": round(time.monotonic() - t0, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", required=True,
                   help='JSON: {name: {"args": [example args], "steps": measured steps}}')
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    try:
        spec = json.loads(args.spec)
        configs = {str(name): ([str(a) for a in c["args"]], int(c["steps"])) for name, c in spec.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        p.error(f"bad --spec: {e}")
    if not configs or any(steps < 1 for _, steps in configs.values()):
        p.error("bad --spec: no configuration, or steps < 1")
    results = {}
    for name, (config_args, steps) in configs.items():
        results[name] = one_config(config_args, steps)
        r = results[name]
        print(f"train_steps: {name}: {r['steps']} steps, median {r['median_s'] * 1e3:.3f} ms "
              f"(p10 {r['p10_s'] * 1e3:.3f}, p90 {r['p90_s'] * 1e3:.3f})", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
