#!/usr/bin/env python3
"""Gang scheduling: two torchrun DDP jobs sharing the GPU, their ranks granted together.

(a) reference: one job (examples/ddp_train.py, NPROC ranks) alone, natively: its losses and final
    parameters;
(b) two such jobs side by side, natively (distinct master ports and run ids): the pair's wall;
(c) the two jobs under libnvshare.so and a scheduler in mode serial with a short quantum (--tq, 0.5 s):
    both finish, each with the losses and parameters of (a) bit for bit, and the scheduler's log has
    no forced eviction ("evict pid=...": a rank that did not release in time);
(d) the same in mode auto (they fit in memory, so they run together): the pair's wall over (b)'s,
    goal <= 1.05.
Without gang grants, one rank of a job would hold the GPU while its peer waited for the lock and the
first waited in the all-reduce. With one GPU both ranks of a job share it (backend gloo: NCCL refuses
two ranks on one GPU; gloo all-reduces CUDA tensors through the host); with NPROC GPUs each rank has
its own (backend nccl).

    python3 -m bench.multigpu.gang_ddp [--quick] [--steps 600] [--tq 0.5] [--port 29610] [--json out.json]
    python3 -m bench.run_all --only gang_ddp --json bench/results/gang-ddp.json

Seven torchrun jobs in four phases, each after a start-up of PyTorch of some seconds: about 2-3
minutes (--quick: fewer steps, about 1.5). The jobs need PyTorch: the first of $BUSY_PYTHON, this
Python, python3, /opt/torch/.venv/bin/python3 that imports torch runs torchrun (python -m
torch.distributed.run). GPU safety: every rank under the library has NVSHARE_GPU_MEMORY and is capped
at MEMORY_LIMIT; a rank holds well under 500 MiB besides its CUDA context.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.multigpu.gang_ddp_report import DROP_RE, all_met, compare, evict_lines, goals, judge, section  # noqa: E402,F401
from bench.core.render import finish  # noqa: E402

NAME = "gang_ddp"
TITLE = "Gang scheduling: two torchrun DDP jobs sharing the GPU"
SHARE, MIN_S, GPU = 180, 90, True
DEFAULT = False  # run it with --only gang_ddp, or alone
RERUN = "python3 -m bench.multigpu.gang_ddp"
EXAMPLE = BENCH.parent / "examples" / "ddp_train.py"
NPROC = 2
SEED = 7
MEMORY_LIMIT = "2GiB"   # per rank, far above what it allocates: a guard, not a constraint
BASE_PORT = 29610       # (a) uses it, (b) the next two, (c) the two after, (d) the last two
ALONE_TIMEOUT_S = 240.0
# A pair may take this many times the job alone (plus start-up) before it counts as hung: serial
# turns make it about twice as long; a deadlock of ranks waiting on each other never ends.
PAIR_TIMEOUT_FACTOR, PAIR_TIMEOUT_EXTRA_S = 6.0, 60.0


def plan(quick: bool, steps: int | None = None, tq: float | None = None,
         port: int | None = None) -> dict:
    return {"steps": steps if steps else (250 if quick else 600), "tq": tq if tq else 0.5,
            "nproc": NPROC, "seed": SEED, "base_port": port if port else BASE_PORT}


def job_argv(launcher: list[str], nproc: int, port: int, run_id: str, steps: int, seed: int,
             out: Path, script: Path = EXAMPLE) -> list[str]:
    """torchrun with the default static rendezvous: --master-port keeps two jobs apart, --rdzv-id
    becomes TORCHELASTIC_RUN_ID, which (with the rendezvous address) is how the library names the job."""
    return [*launcher, "--nproc-per-node", str(nproc), "--master-port", str(port), "--rdzv-id", run_id,
            str(script), "--steps", str(steps), "--seed", str(seed), "--json-out", str(out)]


# ----------------------------------------------------------------------------- the measurement

def run_jobs(specs: list[tuple[str, int]], p: dict, launcher: list[str], env: dict, tmp: Path,
             timeout: float, script: Path = EXAMPLE) -> dict:
    """Start one job per (run id, port) at once; {"wall_s" (first start to last end), "jobs": [each
    one's run_id, port, returncode, timed_out, wall_s and its JSON (losses, params_sha256, ...)]}.
    A job that runs past the timeout is killed with its ranks and counts as not finished."""
    from bench.core.common import harness

    progs = []
    for run_id, port in specs:
        out = tmp / f"{run_id}.json"
        out.unlink(missing_ok=True)
        argv = job_argv(launcher, p["nproc"], port, run_id, p["steps"], p["seed"], out, script)
        progs.append((run_id, port, out, harness.Program(argv, env)))
    t0 = time.monotonic()
    jobs, last = [], t0
    try:
        for run_id, port, out, prog in progs:
            left = max(1.0, t0 + timeout - time.monotonic())
            try:
                run = prog.wait(left)
                code, timed_out, tail = run.returncode, False, run.stderr[-2000:]
            except AssertionError as e:  # Program.wait's timeout (it killed the group already)
                code, timed_out, tail = None, True, str(e)[-2000:]
            last = max(last, time.monotonic())
            job = {"run_id": run_id, "port": port, "returncode": code, "timed_out": timed_out,
                   "wall_s": time.monotonic() - prog.started}
            try:
                job.update(json.loads(out.read_text()))
                job["final_loss"] = job["losses"][-1] if job.get("losses") else None
            except (OSError, ValueError):
                job["stderr_tail"] = tail
            jobs.append(job)
    finally:
        for *_, prog in progs:
            prog.stop()
    return {"wall_s": last - t0, "jobs": jobs}


def _slim(pair: dict) -> dict:
    """A pair's jobs without their loss lists (the verdict compares them; the JSON keeps (a)'s)."""
    return {**pair, "jobs": [{k: v for k, v in j.items() if k != "losses"} for j in pair["jobs"]]}


def measure_parts(p: dict, launcher: list[str], native: dict, scheduler, tmp: Path,
                  script: Path = EXAMPLE) -> dict:
    """All four parts. scheduler(mode, tq) is a context manager that yields (env, log): the
    environment of a job under the library and that scheduler, and log() -> its log so far."""
    port = p["base_port"]
    alone = run_jobs([("gang-alone", port)], p, launcher, native, tmp, ALONE_TIMEOUT_S, script)
    (ref,) = alone["jobs"]
    if ref.get("returncode") != 0 or not ref.get("losses"):
        raise RuntimeError(f"the job alone failed: {json.dumps(ref)[-2000:]}")
    timeout = PAIR_TIMEOUT_EXTRA_S + PAIR_TIMEOUT_FACTOR * ref["wall_s"]

    def pair(tag: str, first: int, env: dict) -> dict:
        return run_jobs([(f"gang-{tag}-a", first), (f"gang-{tag}-b", first + 1)], p, launcher, env,
                        tmp, timeout, script)
    result = {"alone": ref, "native_pair": pair("native", port + 1, native)}
    for i, mode in enumerate(("serial", "auto")):
        with scheduler(mode, p["tq"]) as (env, log):
            out = pair(mode, port + 3 + 2 * i, env)
            text = log()
        lines = evict_lines(text)
        out.update(evictions=len(lines), evict_lines=lines[:10],
                   drops=sum(1 for line in text.splitlines() if DROP_RE.search(line)))
        result[mode] = out
    result["verdict"] = judge(result)
    for key in ("native_pair", "serial", "auto"):
        for job in result[key]["jobs"]:
            job.update(compare(job, ref))  # kept, as the loss lists are not
        result[key] = _slim(result[key])
    return result


def measure(quick: bool = False, steps: int | None = None, tq: float | None = None,
            port: int | None = None) -> dict:
    from bench.core.common import torch_python
    from bench.core.common import harness, require_safe_gpu

    require_safe_gpu()
    p = plan(quick, steps, tq, port)
    python = torch_python()
    launcher = [python, "-m", "torch.distributed.run"]
    lib = harness.library_path()

    @contextmanager
    def scheduler(mode: str, quantum: float):
        with harness.Scheduler(mode=mode, tq=quantum) as sched:
            # torchrun itself runs under the library too; its ranks inherit the environment.
            yield (harness.library_env(lib, sched.socket, NVSHARE_GPU_MEMORY_LIMIT=MEMORY_LIMIT),
                   sched.log)

    tmp = harness.short_tempdir("gang-")
    try:
        parts = measure_parts(p, launcher, harness.native_env(), scheduler, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"parameters": {**p, "python": python, "memory_limit": MEMORY_LIMIT}, **parts}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    quick = quick or (time_left is not None and time_left < 150)
    result = measure(quick=quick)
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="250 steps per job (default 600)")
    p.add_argument("--steps", type=int, help="training steps of every job")
    p.add_argument("--tq", type=float, help="the serial scheduler's quantum in seconds (default 0.5)")
    p.add_argument("--port", type=int, help=f"first of seven master ports (default {BASE_PORT})")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.steps is not None and not 10 <= args.steps <= 100_000:
        p.error("--steps must be from 10 to 100000")
    if args.tq is not None and not 0.05 <= args.tq <= 60:
        p.error("--tq must be from 0.05 to 60")
    if args.port is not None and not 1024 <= args.port <= 65535 - 7:
        p.error("--port must be from 1024 to 65528")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    t0 = time.monotonic()
    result = measure(args.quick, args.steps, args.tq, args.port)
    finish(result, t0, RERUN, args.quick, section, args.json)
    return 0 if all_met(result) else 1


if __name__ == "__main__":
    sys.exit(main())
