#!/usr/bin/env python3
"""The resident training step (bench/launch/train_overhead.py's `large` size) natively, under the
library, and under the library with its timed checkpoints off (NVSHARE_DRAIN_TARGET_MS=0: no busy
time measured), in rounds that rotate which side goes first (a multiple of 3 rounds lets each side
go first equally often). Says whether the busy time's events are what the library adds to a
compute-bound step: the suite's few pairs cannot (its native baselines moved by 0.7% between two
runs minutes apart).

    python3 bench/probes/train_sides.py [--rounds 3] [--config large]

Prints JSON: each side's step medians per round, and per round each library side over the native
run of that round. GPU safety: one process at a time, 5.2 GiB at its peak (the large size).
"""
import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
from bench.launch.train_overhead import CONFIGS, run_configs  # noqa: E402

SIDES = ("native", "library", "library-untimed")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--config", default="large", choices=sorted(CONFIGS))
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    from bench.core.common import harness, require_safe_gpu

    require_safe_gpu()
    conf_args, steps = CONFIGS[args.config]
    spec = {args.config: {"args": conf_args, "steps": steps}}
    ms = {side: [] for side in SIDES}
    with harness.Scheduler(mode="off") as sched, tempfile.TemporaryDirectory() as tmp:
        lib = harness.library_path()
        envs = {"native": harness.native_env(PYTHONHASHSEED=0),
                "library": harness.library_env(lib, sched.socket, PYTHONHASHSEED=0),
                "library-untimed": harness.library_env(lib, sched.socket, PYTHONHASHSEED=0,
                                                       NVSHARE_DRAIN_TARGET_MS=0)}
        for r in range(args.rounds):
            order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]
            for side in order:
                out = run_configs(envs[side], spec, Path(tmp) / f"{side}-{r}.json")
                ms[side].append(out[args.config]["median_s"] * 1e3)
    ratios = {side: [lib_ms / nat for lib_ms, nat in zip(ms[side], ms["native"])]
              for side in SIDES[1:]}
    print(json.dumps({"config": args.config, "step_ms": ms, "over_native": ratios,
                      "median_over_native": {s: statistics.median(v) for s, v in ratios.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
