#!/usr/bin/env python3
"""The training job program of the makespan and interactive benchmarks (one process per job).

The program (one process per job). A deterministic PyTorch MLP (--width, --depth, --batch; Adam,
float32 without TF32, synthetic data labelled by a fixed random "teacher") plus an optional resident
working set of --resident-gib GiB: one float32 buffer that every step scales (`buf.mul_(0.999)`), so
every step touches all of it -- what an eviction must bring back. The process initialises CUDA,
allocates, runs --warmup-steps steps, times --probe-steps more (their median is reported), resets the
model and prints one line `READY {json}`. Then it reads commands, one JSON object a line, on stdin:

    {"cmd": "train", "start": T, "steps": N}            N steps from the instant T
    {"cmd": "train", "start": T, "until": T2}           steps from T until time.monotonic() >= T2
    {"cmd": "interactive", "start": T, "period": P, "count": K}
                                                        one step at T, T+P, ..., T+(K-1)P
    {"cmd": "exit"}                                     (end of input does the same)

T and T2 are absolute time.monotonic() values (CLOCK_MONOTONIC is system-wide, so the benchmark and
every job share one clock): the benchmark gives all jobs of a round the same T after every job has
initialised, so PyTorch's start-up (8-10 s) is outside every makespan. Each command ends with one line
`RESULT {json}`: t_start, t_end (after a torch.cuda.synchronize()), the step times (each step ends
with a synchronize; consecutive time.monotonic() stamps, so they add up to t_end - t_start), the final
loss and a check of the working set. After each command the model and the optimiser are reset, so
every train command of N steps computes the same thing: its final loss is the same in every round,
process and way of running (a correctness check). The working set is not reset: all of its elements
hold the same value at all times, so `min == max` after a command shows that no page was lost or
left stale by an eviction.

    python3 -m bench.scheduling.job_program --resident-gib 1 --steps 500       # standalone: one train command, now
    python3 -m bench.scheduling.job_program --simulate 2 --steps 100           # no GPU, no PyTorch: each step sleeps 2 ms

--simulate replaces PyTorch by sleeps: it lets the benchmarks' orchestration run on a machine without
a GPU (tests/bench).

The benchmark side that starts and drives these processes is bench/scheduling/jobs.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from bench.core.argtypes import non_negative_float, non_negative_int, positive_float, positive_int  # noqa: E402
from bench.core.stats import median  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
READY = "READY "
RESULT = "RESULT "
CLASSES = 16
DATA_POOL = 8  # distinct batches, cycled
DECAY = 0.999  # what every step multiplies the working set by
MAX_STEPS = 10_000_000


# ============================================================================ the command protocol

def train_command(start: float, *, steps: int | None = None, until: float | None = None) -> dict:
    """N steps, or steps until an instant, from `start` (time.monotonic())."""
    if (steps is None) == (until is None):
        raise ValueError("a train command has either steps or until")
    return {"cmd": "train", "start": start, **({"steps": steps} if steps is not None else {"until": until})}


def interactive_command(start: float, period: float, count: int) -> dict:
    """One step at start, start + period, ..., start + (count - 1) * period."""
    return {"cmd": "interactive", "start": start, "period": period, "count": count}


EXIT_COMMAND = {"cmd": "exit"}


def _number(cmd: dict, key: str, *, positive: bool = False) -> float:
    value = cmd.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{cmd.get('cmd')}: {key} must be a finite number, not {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{cmd.get('cmd')}: {key} must be positive, not {value!r}")
    return float(value)


def _count(cmd: dict, key: str) -> int:
    value = cmd.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STEPS:
        raise ValueError(f"{cmd.get('cmd')}: {key} must be an integer from 1 to {MAX_STEPS}, not {value!r}")
    return value


def parse_command(line: str) -> dict:
    """One command line -> a checked command dict; ValueError with the reason otherwise."""
    try:
        cmd = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(cmd, dict):
        raise ValueError("a command is a JSON object")
    kind = cmd.get("cmd")
    if kind == "exit":
        return {"cmd": "exit"}
    if kind == "train":
        start = _number(cmd, "start")
        if ("steps" in cmd) == ("until" in cmd):
            raise ValueError("train: give either steps or until")
        if "steps" in cmd:
            return train_command(start, steps=_count(cmd, "steps"))
        return train_command(start, until=_number(cmd, "until"))
    if kind == "interactive":
        return interactive_command(_number(cmd, "start"), _number(cmd, "period", positive=True),
                                   _count(cmd, "count"))
    raise ValueError(f"unknown command {kind!r}")


def parse_output_line(line: str) -> tuple[str, dict] | None:
    """("ready" | "result", payload) for the program's protocol lines; None for anything else."""
    for prefix, kind in ((READY, "ready"), (RESULT, "result")):
        if line.startswith(prefix):
            try:
                payload = json.loads(line[len(prefix):])
            except json.JSONDecodeError:
                return None
            return (kind, payload) if isinstance(payload, dict) else None
    return None


# ============================================================================ the program

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=positive_int, default=1024, help="units of each hidden layer")
    p.add_argument("--depth", type=positive_int, default=4, help="hidden layers")
    p.add_argument("--batch", type=positive_int, default=256, help="samples per step")
    p.add_argument("--resident-gib", type=non_negative_float, default=0.0,
                   help="working set touched by every step, GiB (default 0: none)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=20)
    p.add_argument("--probe-steps", type=positive_int, default=20,
                   help="steps timed after the warm-up; their median goes into READY")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--simulate", type=positive_float, metavar="MS",
                   help="no PyTorch: every step sleeps MS milliseconds (to test the orchestration)")
    p.add_argument("--steps", type=positive_int, help="standalone: one train command of N steps, then exit")
    p.add_argument("--start-at", type=float, metavar="T",
                   help="standalone: start at this time.monotonic() value (default: at once)")
    return p.parse_args(argv)


class TorchJob:
    """The MLP and its working set on one device. Deterministic: the same seed gives the same data,
    the same initial weights and the same losses."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from torch import nn

        self.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False  # full float32: the same result in every run
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)
        use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.lr = args.lr
        torch.manual_seed(args.seed)
        layers: list[nn.Module] = []
        for _ in range(args.depth):
            layers += [nn.Linear(args.width, args.width), nn.ReLU()]
        layers.append(nn.Linear(args.width, CLASSES))
        self.model = nn.Sequential(*layers).to(self.device)
        self.initial = [p.detach().clone() for p in self.model.parameters()]
        g = torch.Generator().manual_seed(args.seed + 1)
        x = torch.randn(DATA_POOL, args.batch, args.width, generator=g)
        teacher = torch.randn(args.width, CLASSES, generator=g)
        self.x = x.to(self.device)
        self.y = (x @ teacher).argmax(-1).to(self.device)
        elements = int(args.resident_gib * GIB) // 4
        self.resident = torch.ones(elements, dtype=torch.float32, device=self.device) if elements else None
        self.optimizer = self._new_optimizer()
        self.index = 0
        self.loss: Any = None

    def _new_optimizer(self):
        return self.torch.optim.Adam(self.model.parameters(), lr=self.lr)

    def step(self) -> None:
        i = self.index % DATA_POOL
        loss = self.torch.nn.functional.cross_entropy(self.model(self.x[i]), self.y[i])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.resident is not None:
            self.resident.mul_(DECAY)
        self.index += 1
        self.loss = loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def final_loss(self) -> float | None:
        return None if self.loss is None else float(self.loss)

    def reset(self) -> None:
        """Back to the initial weights and a fresh optimiser (its state tensors come from the
        allocator's cache: no new GPU allocation)."""
        with self.torch.no_grad():
            for p, p0 in zip(self.model.parameters(), self.initial):
                p.copy_(p0)
        self.optimizer = self._new_optimizer()
        self.index = 0
        self.loss = None
        self.sync()

    def check_resident(self) -> dict | None:
        if self.resident is None:
            return None
        lo, hi = self.torch.aminmax(self.resident)
        lo, hi = float(lo), float(hi)
        return {"ok": lo == hi and lo > 0, "min": lo, "max": hi}

    def describe(self) -> dict:
        info: dict[str, Any] = {"device": self.device.type, "torch": self.torch.__version__}
        if self.device.type == "cuda":
            info["reserved_bytes"] = int(self.torch.cuda.memory_reserved())
            info["gpu"] = self.torch.cuda.get_device_name()
        return info


class SimulatedJob:
    """The same interface without PyTorch: a step sleeps. For running the orchestration without a GPU."""

    def __init__(self, step_ms: float) -> None:
        self.step_s = step_ms / 1000.0
        self.index = 0

    def step(self) -> None:
        time.sleep(self.step_s)
        self.index += 1

    def sync(self) -> None:
        pass

    def final_loss(self) -> float | None:
        return 1.0 if self.index else None

    def reset(self) -> None:
        self.index = 0

    def check_resident(self) -> dict | None:
        return {"ok": True, "min": 1.0, "max": 1.0}

    def describe(self) -> dict:
        return {"device": "simulated", "step_ms": self.step_s * 1000.0}


def wait_until(instant: float) -> float:
    """Sleep until time.monotonic() reaches `instant` (the last 2 ms spinning, for precision)."""
    while True:
        left = instant - time.monotonic()
        if left <= 0:
            return time.monotonic()
        if left > 0.002:
            time.sleep(left - 0.002)


def run_train(job, cmd: dict) -> dict:
    steps, until = cmd.get("steps"), cmd.get("until")
    t_start = wait_until(cmd["start"])
    stamps = [t_start]
    while True:
        job.step()
        job.sync()
        stamps.append(time.monotonic())
        done = len(stamps) - 1
        if (steps is not None and done >= steps) or (until is not None and stamps[-1] >= until) \
                or done >= MAX_STEPS:
            break
    loss = job.final_loss()
    resident = job.check_resident()
    return {"cmd": "train", "pid": os.getpid(), "start": cmd["start"], "t_start": t_start,
            "t_end": stamps[-1], "late_ms": round((t_start - cmd["start"]) * 1e3, 3), "steps": len(stamps) - 1,
            "step_s": [round(b - a, 7) for a, b in zip(stamps, stamps[1:])],
            "final_loss": loss, "resident": resident}


def run_interactive(job, cmd: dict) -> dict:
    steps = []
    for k in range(cmd["count"]):
        planned = cmd["start"] + k * cmd["period"]
        t0 = wait_until(planned)
        job.step()
        job.sync()
        t1 = time.monotonic()
        steps.append({"planned": planned, "t0": t0, "t1": t1, "dt": round(t1 - t0, 7)})
    return {"cmd": "interactive", "pid": os.getpid(), "start": cmd["start"], "period": cmd["period"],
            "t_start": steps[0]["t0"], "t_end": steps[-1]["t1"], "steps": steps,
            "final_loss": job.final_loss(), "resident": job.check_resident()}


def execute(job, cmd: dict) -> dict:
    result = run_train(job, cmd) if cmd["cmd"] == "train" else run_interactive(job, cmd)
    job.reset()  # after the timed part: the next command computes the same again
    return result


def serve(job, commands: Iterable[str], out: TextIO) -> None:
    """Carry out commands until "exit" or the end of input (the benchmark has gone)."""
    for line in commands:
        if not line.strip():
            continue
        cmd = parse_command(line)
        if cmd["cmd"] == "exit":
            return
        out.write(RESULT + json.dumps(execute(job, cmd)) + "\n")
        out.flush()


def _die_with_parent() -> None:
    """Linux: end this job when the benchmark that started it ends, however it ends."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def make_job(args: argparse.Namespace):
    if args.simulate is not None:
        return SimulatedJob(args.simulate)
    # cuBLAS is deterministic only with a fixed workspace configuration, set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return TorchJob(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.steps is None and args.start_at is not None:
        print("job_program.py: --start-at needs --steps", file=sys.stderr)
        return 2
    _die_with_parent()
    job = make_job(args)
    for _ in range(args.warmup_steps):
        job.step()
    job.sync()
    probe = []
    for _ in range(args.probe_steps):
        t0 = time.monotonic()
        job.step()
        job.sync()
        probe.append(time.monotonic() - t0)
    job.reset()
    ready = {"pid": os.getpid(), "step_ms": median([t * 1e3 for t in probe]), **job.describe()}
    print(READY + json.dumps(ready), flush=True)
    if args.steps is not None:
        start = time.monotonic() if args.start_at is None else args.start_at
        print(RESULT + json.dumps(execute(job, train_command(start, steps=args.steps))), flush=True)
        return 0
    try:
        serve(job, sys.stdin, sys.stdout)
    except ValueError as e:
        print(f"job_program.py: bad command: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
