#!/usr/bin/env python3
"""Run the benchmark suite and write bench/results/suite.json, docs/benchmarks.md and plots.

    python3 -m bench.run_all [--budget 470] [--only NAME,...] [--quick] [--out DIR]

  train_overhead   resident training step time, compute-bound size, library vs native (~60 s)
  launch_overhead  added cost per kernel launch, quick form (~40 s)
  sched_latency    lock round trip and grant latency vs a raw socket ping-pong (~15 s, no GPU)
  switch_cost      switch back after eviction: bulk moves vs a pinned copy, and demand faults (~80 s)
  makespan_fit     jobs that fit: auto mode vs concurrent vs one after the other (~120 s)
  makespan_pair    two jobs that do not fit: TQ 5 s / 30 s, fast vs demand vs sequential (~130 s)
  interactive      high-priority interactive client next to a batch job (~50 s)
  (idle_release: the idle-release benchmark, only when asked for with --only idle_release)

Without a GPU, not in the default run (bench/core/suite.py's CPU group; results in bench/results/cpu.json,
shown in a part of docs/benchmarks.md of their own, with the machine's CPU):

  load             1, 100, 1000 clients on one GPU per mode: registration, lock round trip, handoff (~3 min)
  soak             10^5 malformed frames, 10^4 fuzzed control requests, a probe client, RSS (~2 min)

The benchmarks are the modules listed in bench/core/suite.py (their interface is described there).
The budget is shared in proportion to those shares among the benchmarks still to run, so time one
leaves unused goes to the next and an overrun is taken from the rest; each benchmark gets its share
as `time_left` and fits itself to it. Each runs in a child process of its own: a failure, a crash
or a hang (ended at 1.5x its share) is recorded as an error and the others still run; whatever a
benchmark started is ended when it ends (every process carries a marker in its environment). The
JSON and the Markdown are rewritten after every benchmark, so an interrupted run keeps what it
finished.

GPU safety: nothing starts when the GPU has less than 48 GiB free (checked again before every GPU
benchmark); every process under libnvshare.so has a virtual capacity (NVSHARE_GPU_MEMORY) and the
suite allocates at most a few GiB per process, under 24 GiB in all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parent  # bench/

from bench.core import report  # noqa: E402
from bench.core import suite  # noqa: E402

REPO = BENCH.parent
RESULTS_JSON = REPO / "bench" / "results" / "suite.json"
CPU_JSON = RESULTS_JSON.with_name("cpu.json")  # a run of only benchmarks of suite.CPU (report.SEPARATE)
BENCHMARKS_MD = REPO / "docs" / "benchmarks.md"
RERUN = "bash bench/gpu_validate.sh --bench-only   # or: python3 -m bench.run_all"
RERUN_CPU = "python3 -m bench.run_all --only " + ",".join(suite.CPU)
DEFAULT_BUDGET_S = 470.0
MARKER = "XPUSHARE_BENCH_RUN"  # in the environment of every process a benchmark starts
HANG_FACTOR, HANG_EXTRA_S = 1.5, 15.0  # a benchmark still running after this is ended
STOP_GRACE_S = 5.0  # for its clean-up once told to stop (gpu_validate.sh's timeout kills 15 s later)

Runner = Callable[[bool, "float | None"], dict]


@dataclass(frozen=True)
class Bench:
    name: str        # its key in the results and its --only name
    share_s: float   # its part of the default budget
    min_s: float     # below this much time it is skipped
    gpu: bool        # needs the GPU (safety check before it)
    runner: str      # "module:function" or "module" (then module.run)
    default: bool = True


def _bench(module) -> Bench:
    return Bench(module.NAME, module.SHARE, module.MIN_S, module.GPU, module.__name__,
                 getattr(module, "DEFAULT", True))


BENCHES = [_bench(m) for m in suite.modules()]
BY_NAME = {b.name: b for b in BENCHES}
ALIASES = {"idle": "idle_release"}  # the short name earlier versions documented


def _harness():
    from bench.core.common import harness

    return harness


def _gpu_problem() -> str | None:
    from bench.core.common import gpu_problem

    return gpu_problem(strict=True)


def resolve(runner: str) -> Runner:
    module_name, _, function = runner.partition(":")
    return getattr(importlib.import_module(module_name), function or "run")


# ----------------------------------------------------------------------------- budget and isolation

def shares(benches: list[Bench], seconds_left: float) -> float:
    """The first benchmark's time: its share of what is left, in proportion to the shares of all
    still to run."""
    total = sum(b.share_s for b in benches)
    return seconds_left * benches[0].share_s / total if total else seconds_left


def marked_pids(marker: str) -> list[int]:
    """Live processes (other than this one) whose environment carries MARKER=marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def reap(marker: str, grace_s: float = 3.0) -> list[int]:
    """End every process that carries the marker: SIGTERM, then SIGKILL after `grace_s`."""
    pids = marked_pids(marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and marked_pids(marker):
            time.sleep(0.1)
        pids = marked_pids(marker)
        if not pids:
            break
    return pids


class _Stop(Exception):
    """Raised in a benchmark's process when it is told to stop: its clean-up code runs."""


def _raise_stop(signum, frame) -> None:
    raise _Stop("told to stop")


def _child(runner: str, quick: bool, time_left: float | None, out: str, marker: str) -> None:
    signal.signal(signal.SIGTERM, _raise_stop)
    os.environ[MARKER] = marker
    try:
        result = resolve(runner)(quick, time_left)
        if not isinstance(result, dict):
            result = {"error": f"returned {type(result).__name__}, not a dict"}
    except BaseException as e:  # recorded, never raised: the suite goes on
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    Path(out).write_text(json.dumps(result, default=str))


def run_isolated(bench: Bench, quick: bool, time_left: float | None, hard_limit: float | None) -> dict:
    """Run one benchmark in a child process; end it (and all it started) when it runs past hard_limit
    or when this process is told to stop (_Stop is raised again after the clean-up)."""
    marker = f"{os.getpid()}-{bench.name}-{time.time_ns()}"
    with tempfile.TemporaryDirectory(prefix="nvs-run-") as tmp:
        out = Path(tmp) / "result.json"
        proc = multiprocessing.get_context("fork").Process(
            target=_child, args=(bench.runner, quick, time_left, str(out), marker))
        proc.start()
        hung = False
        try:
            proc.join(hard_limit)
            hung = proc.is_alive()
            if hung:
                print(f"run_all: {bench.name} still running after {hard_limit:.0f} s: stopping it", flush=True)
        finally:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: _Stop unwinds its clean-up
                proc.join(STOP_GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
            left = reap(marker)
        try:
            result = json.loads(out.read_text())
        except (OSError, ValueError):
            result = {"error": f"the benchmark's process ended with exit code {proc.exitcode} and no result"}
        if hung:
            result["error"] = f"ran past {hard_limit:.0f} s and was stopped" + (
                f" ({result['error']})" if "error" in result else "")
        if left:
            result["stray_processes_left"] = left
    return result


# ----------------------------------------------------------------------------- the machine

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
        from bench.core.nvcc import find_nvcc

        nvcc = _cmd([find_nvcc(), "--version"])
    except (RuntimeError, ImportError):
        nvcc = None
    # XPUSHARE_COMMIT first: a copy of the tree (as on a lent GPU machine) may carry a stale .git
    # (and then its status says nothing about the tree either).
    commit = os.environ.get("XPUSHARE_COMMIT")
    dirty = False
    if not commit:
        commit = _cmd(["git", "rev-parse", "--short", "HEAD"])
        dirty = bool(_cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
    index = _harness().visible_gpu_index()
    gpus = gpu.splitlines() if gpu else None
    return {
        "gpus": gpus, "cpu": cpu(),
        "gpu": gpus[index] if gpus and index < len(gpus) else None,
        "torch": torch_v, "torch_cuda": cuda_v, "python": python_v or sys.version.split()[0],
        "nvcc": nvcc.splitlines()[-1] if nvcc else None,
        "commit": f"{commit}{'+local changes' if dirty else ''}" if commit else None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def cpu() -> str:
    """The CPU's model and the cores this process may run on."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def library() -> str | None:
    try:
        return str(_harness().library_path())
    except Exception:  # not built here: only the benchmarks that need it fail
        return None


# ----------------------------------------------------------------------------- the suite

def write_outputs(results: dict, out: Path | None, json_path: Path = RESULTS_JSON,
                  md_path: Path = BENCHMARKS_MD, make_plots: bool = True, final: bool = True) -> None:
    """JSON and Markdown (and copies in `out`) after every benchmark; the plots at the end."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, default=str))
    if json_path.name in report.SEPARATE:  # a part of the report: the suite's results stay its main part
        json_path = json_path.with_name(RESULTS_JSON.name)
        results = report.read(json_path) or {}
    try:
        report.write(results, md_path, json_path.parent, make_plots and final,
                     "not drawn (--no-plots)" if not make_plots else
                     f"drawn when the run ends (`python3 -m bench.core.report {report._shown(json_path)}` draws them now)",
                     json_path=json_path)
    except Exception as e:  # the JSON is what matters; the report can be rendered again from it
        print(f"run_all: cannot write {md_path}: {type(e).__name__}: {e}", flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for path in [json_path, md_path, *report.plot_files(json_path.parent)]:
            if path.exists():
                shutil.copy(path, out / path.name)


def run_suite(selected: list[Bench], quick: bool, budget: float, out: Path | None = None,
              json_path: Path = RESULTS_JSON, md_path: Path = BENCHMARKS_MD, make_plots: bool = True,
              isolate: bool = True, rerun: str = RERUN) -> dict:
    t_begin = time.monotonic()
    deadline = t_begin + budget
    results: dict = {"machine": machine(), "library": library(), "rerun": rerun,
                     "quick": quick, "budget_s": budget, "order": [b.name for b in selected]}
    stopped = False
    for i, bench in enumerate(selected):
        t0 = time.monotonic()
        time_left = shares(selected[i:], deadline - t0)
        if time_left < bench.min_s:
            results[bench.name] = {"error": f"skipped: {time_left:.0f} s of the budget for it, it needs "
                                            f"{bench.min_s:.0f} s"}
            print(f"run_all: {bench.name} SKIPPED ({results[bench.name]['error']})", flush=True)
            continue
        problem = _gpu_problem() if bench.gpu else None
        if problem:
            results[bench.name] = {"error": f"refused: {problem}"}
            print(f"run_all: {bench.name} REFUSED: {problem}", flush=True)
        else:
            print(f"run_all: {bench.name}: {time_left:.0f} s{' (quick)' if quick else ''} ...",
                  flush=True)
            hard_limit = max(time_left * HANG_FACTOR, time_left + HANG_EXTRA_S)
            try:
                if isolate:
                    results[bench.name] = run_isolated(bench, quick, time_left, hard_limit)
                else:
                    results[bench.name] = resolve(bench.runner)(quick, time_left)
            except _Stop:
                results[bench.name] = {"error": "stopped: the suite was told to stop"}
                stopped = True
            except Exception as e:
                results[bench.name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        section = results[bench.name]
        section["seconds"] = round(time.monotonic() - t0, 1)
        section["time_left_s"] = round(time_left, 1)
        section["quick"] = quick
        if "error" in section:
            print(f"run_all: {bench.name} FAILED: {str(section['error']).splitlines()[0]}", flush=True)
        print(f"run_all: {bench.name} took {section['seconds']} s ({deadline - time.monotonic():.0f} s of the "
              f"budget left)", flush=True)
        results["seconds"] = round(time.monotonic() - t_begin, 1)
        write_outputs(results, out, json_path, md_path, make_plots, final=False)
        if stopped:
            break
    results["seconds"] = round(time.monotonic() - t_begin, 1)
    write_outputs(results, out, json_path, md_path, make_plots)
    return results


def select(only: str | None) -> list[Bench]:
    """The benchmarks named (comma-separated), in suite order."""
    if not only:
        return [b for b in BENCHES if b.default]
    names = [ALIASES.get(k.strip(), k.strip()) for k in only.split(",") if k.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    return [b for b in BENCHES if b.name in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help=f"time for the whole suite (default {DEFAULT_BUDGET_S:.0f}; for --only "
                        f"{','.join(suite.CPU)} or some of them, the sum of their shares)")
    p.add_argument("--time-limit", type=float, dest="budget", help=argparse.SUPPRESS)  # the older name of --budget
    p.add_argument("--only", help="comma-separated subset, by name: " + ", ".join(BY_NAME))
    p.add_argument("--quick", action="store_true", help="every benchmark in its quick form")
    p.add_argument("--out", type=Path, help="also copy the JSON, the Markdown and the plots here")
    p.add_argument("--json", type=Path, help="results file (default bench/results/suite.json; "
                   "bench/results/cpu.json when only benchmarks without a GPU of bench/core/suite.py's CPU are run)")
    p.add_argument("--md", type=Path, default=BENCHMARKS_MD, help="report (default docs/benchmarks.md)")
    p.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")
    args = p.parse_args(argv)
    try:
        selected = select(args.only)
    except ValueError as e:
        p.error(str(e))
    cpu_run = all(b.name in suite.CPU for b in selected)
    if args.budget is None:
        args.budget = sum(b.share_s for b in selected) if cpu_run else DEFAULT_BUDGET_S
    if args.budget <= 0:
        p.error("--budget must be positive")
    args.json = args.json or (CPU_JSON if cpu_run else RESULTS_JSON)
    if any(b.gpu for b in selected):
        problem = _gpu_problem()
        if problem:
            print(f"run_all: refusing to run: {problem}", file=sys.stderr)
            return 3
    signal.signal(signal.SIGTERM, _raise_stop)  # e.g. gpu_validate.sh's timeout: keep what is done
    try:
        results = run_suite(selected, args.quick, args.budget, args.out, args.json, args.md, not args.no_plots,
                            rerun=RERUN_CPU + (" --quick" if args.quick else "") if cpu_run else RERUN)
    except _Stop:
        print("run_all: stopped", file=sys.stderr)
        return 1
    print(args.md.read_text() if args.md.exists() else "")
    failed = [b.name for b in selected if "error" in results.get(b.name, {})]
    if failed:
        print(f"run_all: failed or skipped: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
