#!/usr/bin/env python3
"""Choosing NVSHARE_IDLE_RELEASE_MS: early releases in a busy training loop vs. how fast an idle GPU
is given back.

For each value, runs examples/pytorch_train.py under libnvshare.so (scheduler in mode `off`) with a
realistic input pipeline: a DataLoader with 2 worker processes that spend --data-delay-ms of CPU time
on each batch (decoding, augmentation), so the GPU waits for data a little on most steps. After
training the process stays alive without GPU work for --idle-tail-s. From the scheduler's log
(stamped on arrival, on the same clock as the program's marks) it counts:
- releases during training (each one costs a drain and a new lock request: the value is too small);
- the delay from the end of training to the release (how quickly an idle GPU is given back).
The right default is the smallest value with no release during training.

    python3 -m bench.scheduling.idle_release [--values 10,50,250,1000] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.core.common import REPO, harness, require_safe_gpu
from bench.core.stats import median
from bench.core.render import f

NAME = "idle_release"
TITLE = "Idle release (NVSHARE_IDLE_RELEASE_MS)"
SHARE, MIN_S, GPU = 60, 45, True
DEFAULT = False  # run only when asked for: run_all.py --only idle_release
RERUN = "python3 -m bench.run_all --only idle_release"

VALUES_MS = [10, 50, 250, 1000]
PIPELINE = ["--loader-workers", "2", "--data-delay-ms", "20"]


def one_value(lib: Path, sched, value_ms: int, steps: int, tail_s: float, out: Path) -> dict:
    env = harness.library_env(lib, sched.socket, NVSHARE_IDLE_RELEASE_MS=value_ms)
    argv = harness.python_cmd(REPO / "examples" / "pytorch_train.py", "--steps", steps, "--time",
                              "--idle-tail-s", tail_s, "--json-out", out, *PIPELINE)
    run = harness.run(argv, env, timeout=300).check()
    result = json.loads(out.read_text())
    marks = result["marks"]
    releases = [e.t for e in sched.events("release", {run.pid}) if e.fields.get("reason") == "idle"]
    during = [t for t in releases if marks["first_step_done"] < t <= marks["train_end"]]
    after = [t - marks["train_end"] for t in releases if t > marks["train_end"]]
    times = sorted(result["step_times_s"][1:])
    return {
        "idle_release_ms": value_ms,
        "steps": steps,
        "releases_during_training": len(during),
        "releases_per_step": len(during) / max(1, steps - 1),
        "median_step_ms": median(times) * 1e3,
        "p90_step_ms": times[int(0.9 * (len(times) - 1))] * 1e3 if times else None,
        "release_after_idle_ms": min(after) * 1e3 if after else None,
    }


def measure(lib: Path, sched, values: list[int] | None = None, steps: int = 150,
            tail_s: float = 2.5) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="nvs-bench-") as tmp:
        for value in values or VALUES_MS:
            rows.append(one_value(lib, sched, value, steps, tail_s, Path(tmp) / f"idle-{value}.json"))
    quiet = [r["idle_release_ms"] for r in rows if r["releases_during_training"] == 0]
    return {"pipeline": PIPELINE, "steps": steps, "idle_tail_s": tail_s, "rows": rows,
            "smallest_value_without_releases_ms": min(quiet) if quiet else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--values", default=",".join(map(str, VALUES_MS)), help="comma-separated ms")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    require_safe_gpu()
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, [int(v) for v in args.values.split(",")], args.steps)
    for r in result["rows"]:
        print(f"{r['idle_release_ms']:5d} ms: {r['releases_during_training']:3d} releases during training, "
              f"median step {r['median_step_ms']:.2f} ms, released {r['release_after_idle_ms']} ms after idle")
    print(f"smallest value without releases: {result['smallest_value_without_releases_ms']} ms")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


# ----------------------------------------------------------------------------- in the suite

def run(quick: bool, time_left: float | None) -> dict:
    with harness.Scheduler(mode="off") as sched:
        return measure(harness.library_path(), sched, steps=100 if quick else 150)


# ----------------------------------------------------------------------------- its report

def section(s: dict) -> str:
    lines = ["| NVSHARE_IDLE_RELEASE_MS | releases during training | median step ms | released after idle, ms |",
             "|---:|---:|---:|---:|"]
    for r in s.get("rows") or []:
        lines.append(f"| {r.get('idle_release_ms')} | {r.get('releases_during_training')} | "
                     f"{f(r.get('median_step_ms'), 2)} | {f(r.get('release_after_idle_ms'), 0)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
