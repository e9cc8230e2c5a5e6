#!/usr/bin/env python3
"""Run the issue-2 benchmarks and write bench/results/issue2.json and docs/benchmarks.md.

    python3 bench/run_all.py [--out DIR] [--quick] [--only launch,train,idle]

Each benchmark measures its native baseline in the same run, so every number comes with the
baseline it is compared to. A benchmark that fails is recorded as an error; the others still run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import idle_release
import launch_overhead
import train_overhead
from common import REPO, harness, require_safe_gpu

RESULTS_JSON = REPO / "bench" / "results" / "issue2.json"
BENCHMARKS_MD = REPO / "docs" / "benchmarks.md"
RERUN = "bash bench/gpu_validate.sh --bench-only   # or: python3 bench/run_all.py"


def _cmd(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine() -> dict:
    gpu = _cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    versions = _cmd([sys.executable, "-c", "import torch, platform; "
                     "print(torch.__version__, torch.version.cuda, platform.python_version())"])
    torch_v, cuda_v, python_v = (versions.split() + [None] * 3)[:3] if versions else (None,) * 3
    try:
        nvcc = _cmd([launch_overhead.find_nvcc(), "--version"])
    except RuntimeError:
        nvcc = None
    commit = _cmd(["git", "rev-parse", "--short", "HEAD"])
    dirty = bool(_cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
    return {
        "gpus": gpu.splitlines() if gpu else None,
        "gpu": gpu.splitlines()[harness.visible_gpu_index()] if gpu else None,
        "torch": torch_v, "torch_cuda": cuda_v, "python": python_v,
        "nvcc": nvcc.splitlines()[-1] if nvcc else None,
        "commit": f"{commit}{'+local changes' if dirty else ''}" if commit else None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


BENCHES = {
    "launch": ("launch_overhead", lambda lib, s, quick: launch_overhead.measure(lib, s, reps=3 if quick else 5)),
    "train": ("train_overhead", lambda lib, s, quick: train_overhead.measure(lib, s, reps=2 if quick else 3)),
    "idle": ("idle_release", lambda lib, s, quick: idle_release.measure(lib, s, steps=100 if quick else 150)),
}


def run_benches(only: list[str], quick: bool) -> dict:
    lib = harness.library_path()
    results: dict = {"machine": machine(), "library": str(lib), "rerun": RERUN}
    with harness.Scheduler(mode="off") as sched:
        for key in only:
            name, fn = BENCHES[key]
            t0 = time.monotonic()
            print(f"run_all: {name} ...", flush=True)
            try:
                results[name] = fn(lib, sched, quick)
            except Exception as e:  # one broken benchmark must not lose the others
                results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
                print(f"run_all: {name} FAILED: {e}", flush=True)
            results[name]["seconds"] = round(time.monotonic() - t0, 1)
    return results


# ----------------------------------------------------------------------------- the report

def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _error(section: dict) -> str | None:
    if "error" not in section:
        return None
    return f"Not measured: `{section['error'].splitlines()[0]}` (details in bench/results/issue2.json)\n"


def launch_table(section: dict) -> str:
    labels = {
        "driver_submit_ns": "cuLaunchKernel (linked), time in the call",
        "driver_total_ns": "cuLaunchKernel (linked), with a sync per 100 launches",
        "runtime_submit_ns": "`<<<>>>` via the CUDA runtime, time in the call",
        "runtime_total_ns": "`<<<>>>` via the CUDA runtime, with a sync per 100 launches",
        "null_call_ns": "cuLaunchKernel(NULL) rejected at once (the call path alone)",
    }
    lines = ["| launch of an empty kernel | native ns | under libnvshare.so ns | added ns | ratio |",
             "|---|---:|---:|---:|---:|"]
    for key, label in labels.items():
        m = section["metrics"][key]
        lines.append(f"| {label} | {_f(m['native'])} | {_f(m['library'])} | {m['delta']:+.1f} | "
                     f"{_f(m['ratio'], 3)} |")
    return "\n".join(lines) + (f"\n\nMedians of {section['reps']} alternating runs of each side, "
                               f"{section['launches_per_rep']} launches per run.\n")


def train_table(section: dict) -> str:
    lines = ["| job | native ms/step | under libnvshare.so ms/step | ratio |", "|---|---:|---:|---:|"]
    for name, row in section["configs"].items():
        lines.append(f"| {name} (`{' '.join(row['args'])}`) | {_f(row['native_ms'], 3)} | "
                     f"{_f(row['library_ms'], 3)} | {_f(row['ratio'], 4)} |")
    return "\n".join(lines) + (f"\n\nexamples/pytorch_train.py, median step time after {section['warmup_steps']} "
                               f"warm-up steps of {section['steps']}, median of {section['reps']} alternating "
                               f"runs of each side; scheduler in mode `off` (one job, resident).\n")


def idle_table(section: dict) -> str:
    lines = ["| NVSHARE_IDLE_RELEASE_MS | releases during training | per step | median step ms | "
             "p90 step ms | released after idle, ms |", "|---:|---:|---:|---:|---:|---:|"]
    for r in section["rows"]:
        lines.append(f"| {r['idle_release_ms']} | {r['releases_during_training']} | "
                     f"{r['releases_per_step']:.3f} | {_f(r['median_step_ms'], 2)} | {_f(r['p90_step_ms'], 2)} | "
                     f"{_f(r['release_after_idle_ms'], 0)} |")
    best = section["smallest_value_without_releases_ms"]
    return "\n".join(lines) + (
        f"\n\nexamples/pytorch_train.py `{' '.join(section['pipeline'])}`, {section['steps']} steps, then "
        f"{section['idle_tail_s']} s without GPU work. Smallest value with no release during training: "
        f"**{best if best is not None else 'none of those tried'} ms** (the library's default is 250 ms).\n")


def render(results: dict) -> str:
    m = results["machine"]
    parts = [
        "# Benchmarks\n",
        "Written by `bench/run_all.py`; every table compares with a native baseline measured in the same run.\n",
        f"- GPU: {m['gpu'] or 'unknown'} (name, driver, memory)",
        f"- PyTorch {m['torch']} (CUDA {m['torch_cuda']}), Python {m['python']}, nvcc: {m['nvcc']}",
        f"- Date: {m['date']}; commit {m['commit']}",
        f"- Rerun: `{results['rerun']}`\n",
    ]
    sections = [("Kernel launch overhead", "launch_overhead", launch_table),
                ("Training step time", "train_overhead", train_table),
                ("Idle release (NVSHARE_IDLE_RELEASE_MS)", "idle_release", idle_table)]
    for title, key, table in sections:
        if key in results:
            parts.append(f"## {title}\n")
            parts.append(_error(results[key]) or table(results[key]))
    return "\n".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also copy the JSON and the Markdown here")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--only", default=",".join(BENCHES), help=f"comma-separated subset of {','.join(BENCHES)}")
    args = p.parse_args()
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = set(only) - set(BENCHES)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    require_safe_gpu()
    results = run_benches(only, args.quick)
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(results, indent=1))
    BENCHMARKS_MD.write_text(render(results))
    print(BENCHMARKS_MD.read_text())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(RESULTS_JSON, args.out / RESULTS_JSON.name)
        shutil.copy(BENCHMARKS_MD, args.out / BENCHMARKS_MD.name)
    failed = [k for k in results if isinstance(results[k], dict) and "error" in results[k]]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
