#!/usr/bin/env python3
"""The training job of the makespan and interactive benchmarks, and the benchmark side that drives it.

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

    python3 bench/jobs.py --resident-gib 1 --steps 500       # standalone: one train command, now
    python3 bench/jobs.py --simulate 2 --steps 100           # no GPU, no PyTorch: each step sleeps 2 ms

--simulate replaces PyTorch by sleeps: it lets the benchmarks' orchestration run on a machine without
a GPU (tests/bench).

The benchmark side (imported by makespan.py and interactive.py): JobGroup starts job processes with
their environments (natively or under libnvshare.so), waits for READY, sends commands and collects
results, and ends every process it started when it closes (also on errors and timeouts; each job also
dies with the benchmark process, PR_SET_PDEATHSIG). Also here: summaries and statistics of results,
reading the scheduler's log (drops, releases with their drain/evict/prefetch times), and the GPU
memory rules the benchmarks share: the safety limits and the choice of a virtual capacity where one
job fits and two do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

GIB = 1 << 30
MIB = 1 << 20
READY = "READY "
RESULT = "RESULT "
CLASSES = 16
DATA_POOL = 8  # distinct batches, cycled
DECAY = 0.999  # what every step multiplies the working set by
START_MARGIN_S = 0.5  # a round starts this long after its commands are sent: every job is waiting by then
MAX_STEPS = 10_000_000

# GPU safety (binding on the lent GPU machine): under libnvshare.so every cudaMalloc becomes managed
# memory, and a card asked for more managed memory than it has can hang. Oversubscription is made
# with a smaller virtual capacity (nvshare-scheduler --gpu-memory), never for real.
MIN_FREE_GIB = 48.0  # refuse to start when the GPU has less free memory than this
LIBRARY_TOTAL_LIMIT_GIB = 24.0  # all processes under the library together allocate at most this
CLIENT_VIRTUAL_CAPACITY = 16 * GIB  # NVSHARE_GPU_MEMORY of every job, >= the scheduler's --gpu-memory
DEFAULT_RESERVE_FRACTION = 0.05  # the scheduler's default --reserve in auto admission
CLIENT_OVERHEAD = 768 * MIB  # what auto admission adds to each client's footprint (its CUDA context)


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
    p.add_argument("--width", type=_positive_int, default=1024, help="units of each hidden layer")
    p.add_argument("--depth", type=_positive_int, default=4, help="hidden layers")
    p.add_argument("--batch", type=_positive_int, default=256, help="samples per step")
    p.add_argument("--resident-gib", type=_non_negative_float, default=0.0,
                   help="working set touched by every step, GiB (default 0: none)")
    p.add_argument("--warmup-steps", type=_non_negative_int, default=20)
    p.add_argument("--probe-steps", type=_positive_int, default=20,
                   help="steps timed after the warm-up; their median goes into READY")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--simulate", type=_positive_float, metavar="MS",
                   help="no PyTorch: every step sleeps MS milliseconds (to test the orchestration)")
    p.add_argument("--steps", type=_positive_int, help="standalone: one train command of N steps, then exit")
    p.add_argument("--start-at", type=float, metavar="T",
                   help="standalone: start at this time.monotonic() value (default: at once)")
    return p.parse_args(argv)


def positive(kind):
    """An argparse type: `kind` (int or float) of the text, which must be above zero."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive number is required")
        return value
    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive integer is required")
    return value


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid number {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive number is required")
    return value


def _non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: zero or more is required")
    return value


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
        print("jobs.py: --start-at needs --steps", file=sys.stderr)
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
        print(f"jobs.py: bad command: {e}", file=sys.stderr)
        return 2
    return 0


# ============================================================================ the benchmark side

class JobFailed(RuntimeError):
    """A job process exited, timed out or answered something unexpected."""


def say(prefix: str, message: str) -> None:
    print(f"{prefix}: {message}", flush=True)


@dataclass(frozen=True)
class JobSize:
    """The job program's size arguments."""

    width: int = 1024
    depth: int = 4
    batch: int = 256
    resident_gib: float = 0.0

    def args(self) -> list[str]:
        return ["--width", str(self.width), "--depth", str(self.depth), "--batch", str(self.batch),
                "--resident-gib", f"{self.resident_gib:g}"]

    def footprint_estimate(self) -> int:
        """Bytes the job allocates on the GPU (what it reports to the scheduler), estimated: weights,
        gradients, Adam's two moments and the reset copy; data and activations; the working set;
        256 MiB for the caching allocator's rounding and cuBLAS's workspace. The context is not in it."""
        params = self.depth * (self.width * self.width + self.width) + self.width * CLASSES + CLASSES
        model = 5 * 4 * params
        data = DATA_POOL * self.batch * (self.width * 4 + 8)
        activations = 4 * 4 * self.batch * self.width * (self.depth + 1)
        resident = math.ceil(self.resident_gib * GIB / (2 * MIB)) * 2 * MIB
        return model + data + activations + resident + 256 * MIB

    def as_dict(self) -> dict:
        return {"width": self.width, "depth": self.depth, "batch": self.batch, "resident_gib": self.resident_gib}


def job_argv(size: JobSize, simulate_ms: float | None = None, extra: Iterable[str] = ()) -> list[str]:
    argv = [sys.executable, str(BENCH / "jobs.py"), *size.args(), *extra]
    if simulate_ms is not None:
        argv += ["--simulate", f"{simulate_ms:g}"]
    return argv


def native_env(harness, **extra: object) -> dict[str, str]:
    """A job without the library (the same hash seed everywhere: one source of variation fewer)."""
    return harness.native_env(PYTHONHASHSEED=0, **extra)


def library_env(harness, lib: Path | None, sock: Path, capacity: int, **extra: object) -> dict[str, str]:
    """A job under libnvshare.so and the benchmark's scheduler. Its NVSHARE_GPU_MEMORY is at least the
    scheduler's capacity. lib None (a dry run without a GPU): the same variables, no library."""
    gpu_memory = str(max(CLIENT_VIRTUAL_CAPACITY, capacity))
    if lib is None:
        return harness.native_env(PYTHONHASHSEED=0, NVSHARE_SOCK_PATH=sock, NVSHARE_GPU_MEMORY=gpu_memory,
                                  **extra)
    return harness.library_env(lib, sock, gpu_memory=gpu_memory, PYTHONHASHSEED=0, **extra)


class JobProcess:
    """One job program: commands go to its stdin, its READY/RESULT lines come back through a queue,
    its stderr goes to a file (a chatty process never blocks on a full pipe)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self._err = tempfile.TemporaryFile("w+")
        self._messages: queue.Queue = queue.Queue()
        self.proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, bufsize=1, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name=f"job-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = parse_output_line(line)
            if message is not None:
                self._messages.put(message)
        self._messages.put(None)  # end of output: the process has gone

    def send(self, command: dict) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as e:
            raise JobFailed(f"{self.name}: cannot send a command ({e})\n{self.stderr_tail()}") from None

    def expect(self, kind: str, timeout: float) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise JobFailed(f"{self.name} (pid {self.pid}): no {kind} within {timeout:.0f} s\n"
                            f"{self.stderr_tail()}") from None
        if message is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            raise JobFailed(f"{self.name} (pid {self.pid}) exited with {code} before its {kind}\n"
                            f"{self.stderr_tail()}")
        got, payload = message
        if got != kind:
            raise JobFailed(f"{self.name}: expected {kind}, got {got}: {payload}")
        return payload

    def stderr_tail(self, chars: int = 3000) -> str:
        try:
            self._err.flush()
            self._err.seek(0)
            text = self._err.read()
        except (OSError, ValueError):
            return ""
        return f"--- stderr of {self.name} (tail) ---\n{text[-chars:]}" if text else ""

    def stop(self, grace: float = 5.0) -> None:
        """Ask it to exit; after `grace` seconds end its whole process group."""
        if self.proc.poll() is None:
            try:
                self.send(EXIT_COMMAND)
                self.proc.wait(timeout=grace)
            except (JobFailed, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its session: also whatever it started
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()
        self._reader.join(timeout=5)  # it ends at the end of the output: close the pipe after it
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._err.close()


@dataclass
class Round:
    """Jobs that ran one command each from a common instant `start`."""

    start: float
    results: dict[str, dict]

    def makespan(self) -> float:
        """From the common start to the end of the last job."""
        return makespan(self.start, self.results.values())


class JobGroup:
    """The job processes of one benchmark step. Closing it ends all of them, whatever happened."""

    def __init__(self, prefix: str = "jobs") -> None:
        self.prefix = prefix
        self.jobs: dict[str, JobProcess] = {}
        self.ready: dict[str, dict] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> JobProcess:
        if name in self.jobs:
            raise ValueError(f"job {name!r} started twice")
        self.jobs[name] = JobProcess(name, argv, env)
        return self.jobs[name]

    def pid(self, name: str) -> int:
        return self.jobs[name].pid

    def wait_ready(self, timeout: float) -> dict[str, dict]:
        deadline = time.monotonic() + timeout
        for name, job in self.jobs.items():
            if name not in self.ready:
                self.ready[name] = job.expect("ready", deadline - time.monotonic())
        return self.ready

    def run(self, commands: dict[str, dict], timeout: float) -> dict[str, dict]:
        """Send each job its command, then collect every result."""
        for name, command in commands.items():
            self.jobs[name].send(command)
        deadline = time.monotonic() + timeout
        return {name: self.jobs[name].expect("result", deadline - time.monotonic()) for name in commands}

    def train(self, names: list[str], *, steps: int | None = None, seconds: float | None = None,
              timeout: float) -> Round:
        """The named jobs train together from one instant: `steps` each, or for `seconds`."""
        start = time.monotonic() + START_MARGIN_S
        until = None if seconds is None else start + seconds
        command = train_command(start, steps=steps, until=until)
        return Round(start, self.run({name: command for name in names}, timeout + START_MARGIN_S))

    def close(self) -> None:
        for job in self.jobs.values():
            job.stop()

    def __enter__(self) -> JobGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Deadline:
    """The time a benchmark has left (None: no limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def allows(self, seconds: float) -> bool:
        left = self.left()
        return left is None or left >= seconds


# ============================================================================ reading results

def median(values: Iterable[float]) -> float | None:
    data = sorted(values)
    if not data:
        return None
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    data = sorted(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def ratio(ours: float | None, baseline: float | None) -> float | None:
    if ours is None or not baseline:
        return None
    return ours / baseline


def makespan(start: float, results: Iterable[dict]) -> float:
    """From the common start instant to the last job's end."""
    ends = [r["t_end"] for r in results]
    if not ends:
        raise ValueError("no results")
    return max(ends) - start


def sequential_seconds(results: Iterable[dict]) -> float:
    """Jobs run one after the other: the sum of their times alone."""
    return sum(r["t_end"] - r["t_start"] for r in results)


def summarise_train(result: dict, slow_factor: float = 3.0, keep_slow: int = 20) -> dict:
    """The numbers of one train result, without the full list of step times: the slowest steps
    (over slow_factor x the median) are kept with their index, which shows where switches happened."""
    times = result["step_s"]
    med = median(times)
    slow = sorted(((i, t) for i, t in enumerate(times) if med and t > slow_factor * med),
                  key=lambda item: -item[1])[:keep_slow]
    return {
        "pid": result["pid"], "t_start": result["t_start"], "t_end": result["t_end"],
        "late_ms": result.get("late_ms"), "steps": result["steps"],
        "seconds": result["t_end"] - result["t_start"],
        "median_step_ms": None if med is None else med * 1e3,
        "p90_step_ms": _ms(percentile(times, 90)), "max_step_ms": _ms(max(times, default=None)),
        "slow_steps": [[i, round(t * 1e3, 3)] for i, t in sorted(slow)],
        "final_loss": result.get("final_loss"),
        "resident_ok": (result.get("resident") or {}).get("ok", True),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def correctness(summaries: Iterable[dict], same_work: bool = True) -> dict:
    """Train commands of the same number of steps compute the same: one final loss (same_work);
    in any case the loss is finite and all elements of the working set agree."""
    items = list(summaries)
    losses = sorted({s["final_loss"] for s in items if s.get("final_loss") is not None})
    bad_resident = [s["pid"] for s in items if not s.get("resident_ok", True)]
    finite = all(math.isfinite(v) for v in losses)
    return {"final_losses": losses, "working_set_bad_pids": bad_resident,
            "ok": finite and not bad_resident and (len(losses) <= 1 or not same_work)}


DURATION_RE = re.compile(r"^(-?[0-9]+(?:\.[0-9]*)?(?:e-?[0-9]+)?)(us|ms|s)$")


def duration_s(text: str | None) -> float | None:
    """"12.3ms" / "1.23s" / "170us" (the scheduler log's units) -> seconds; None if not a duration."""
    if not text:
        return None
    m = DURATION_RE.match(text)
    if m is None:
        return None
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def events_of(events: Iterable, kind: str, pids: Iterable[int], t0: float, t1: float) -> list:
    """Scheduler log events (harness.Event: t, kind, pid, fields) of a kind, for pids, within [t0, t1]."""
    wanted = set(pids)
    return [e for e in events if e.kind == kind and e.pid in wanted and t0 <= e.t <= t1]


def switches(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    """Each drop of one of `pids` within [t0, t1], with the release that answered it: the handoff time
    seen by the scheduler (drop -> release) and what the client measured (drain, evict, and the
    prefetch at the grant it released)."""
    evs = sorted(events, key=lambda e: e.t)
    found = []
    for drop in events_of(evs, "drop", pids, t0, t1):
        release = next((e for e in evs if e.kind == "release" and e.pid == drop.pid and e.t >= drop.t), None)
        found.append({
            "pid": drop.pid, "t_drop": drop.t, "reason": drop.fields.get("reason"),
            "evict": drop.fields.get("evict") == "yes",
            "t_release": None if release is None else release.t,
            "handoff_ms": None if release is None else (release.t - drop.t) * 1e3,
            **{f"{k}_ms": _ms(duration_s(release.fields.get(k))) if release else None
               for k in ("drain", "evict", "prefetch")},
        })
    return found


def releases(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    """Release lines of pids within [t0, t1] with their reason and measured times (ms)."""
    return [{"pid": e.pid, "t": e.t, "reason": e.fields.get("reason"),
             **{f"{k}_ms": _ms(duration_s(e.fields.get(k))) for k in ("held", "drain", "evict", "prefetch")}}
            for e in events_of(events, "release", pids, t0, t1)]


def grants(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    return [{"pid": e.pid, "t": e.t, "prefetch": e.fields.get("prefetch") == "yes"}
            for e in events_of(events, "grant", pids, t0, t1)]


def switch_totals(found: list[dict], rels: list[dict]) -> dict:
    """Medians over a round's switches: handoff (drop -> release), the client's drain and evict, and
    the bulk prefetches reported by releases (0 = none was done)."""
    prefetches = [r["prefetch_ms"] for r in rels if r.get("prefetch_ms")]
    return {
        "count": len(found),
        "evicting": sum(1 for s in found if s["evict"]),
        "reasons": sorted({s["reason"] for s in found if s["reason"]}),
        "handoff_ms": median(s["handoff_ms"] for s in found if s["handoff_ms"] is not None),
        "drain_ms": median(s["drain_ms"] for s in found if s["drain_ms"] is not None),
        "evict_ms": median(s["evict_ms"] for s in found if s["evict_ms"] is not None),
        "prefetch_ms": median(prefetches),
        "prefetches": len(prefetches),
    }


# ============================================================================ GPU memory

def require_safe_gpu(harness, min_free_gib: float = MIN_FREE_GIB) -> None:
    """Refuse to run on a GPU with less than `min_free_gib` free (someone else is using it)."""
    mem = harness.gpu_memory_mib()
    problem = free_memory_problem(mem, min_free_gib)
    if problem:
        raise RuntimeError(f"refusing to run: {problem}")


def free_memory_problem(mem: tuple[int, int] | None, min_free_gib: float = MIN_FREE_GIB) -> str | None:
    if mem is None:
        return None  # no nvidia-smi: nothing to check here (a dry run, or the programs will find out)
    free, total = mem
    if free < min_free_gib * 1024:
        return (f"only {free} MiB of {total} MiB GPU memory is free (need {min_free_gib:g} GiB): "
                "someone else is using the GPU")
    return None


def library_total_problem(footprints: Iterable[int], limit_gib: float = LIBRARY_TOTAL_LIMIT_GIB) -> str | None:
    """The processes under the library would allocate more than the safety limit in total."""
    total = sum(footprints)
    if total > limit_gib * GIB:
        return (f"the jobs under libnvshare.so would allocate {total / GIB:.1f} GiB together, over the "
                f"{limit_gib:g} GiB safety limit: make them smaller")
    return None


def budget_of(capacity: int, reserve: int | None = None) -> int:
    """What auto admission may hand out: capacity minus the reserve (default 5% of capacity)."""
    return capacity - (round(capacity * DEFAULT_RESERVE_FRACTION) if reserve is None else reserve)


def counted(footprint: int, overhead: int = CLIENT_OVERHEAD) -> int:
    """A client's footprint as auto admission counts it: what it reported plus its context."""
    return footprint + overhead


def fits_together(footprints: list[int], budget: int, overhead: int = CLIENT_OVERHEAD) -> bool:
    return sum(counted(f, overhead) for f in footprints) <= budget


def separates(footprints: list[int], budget: int, overhead: int = CLIENT_OVERHEAD) -> bool:
    """Each job fits alone, all of them together do not."""
    return (max(counted(f, overhead) for f in footprints) <= budget
            and not fits_together(footprints, budget, overhead))


def separating_capacity(footprints: list[int], overhead: int = CLIENT_OVERHEAD,
                        reserve_fraction: float = DEFAULT_RESERVE_FRACTION) -> int:
    """A capacity whose budget lies halfway between the largest job alone and all of them together
    (the widest margin for both conditions), rounded up to 64 MiB."""
    if len(footprints) < 2:
        raise ValueError("separating needs at least two jobs")
    sizes = [counted(f, overhead) for f in footprints]
    budget = (max(sizes) + sum(sizes)) / 2
    return math.ceil(budget / (1 - reserve_fraction) / (64 * MIB)) * 64 * MIB


def scheduler_status(sock: Path) -> dict | None:
    """`nvsharectl status --json` of the benchmark's scheduler; None if it cannot be had."""
    try:
        from xpushare.protocol import CtlClient

        with CtlClient(sock) as client:
            reply = client.request("status")
    except Exception:  # diagnostics only: a benchmark goes on without them
        return None
    return reply if reply.get("ok") else None


def control(sock: Path, op: str, **fields: object) -> dict:
    """One control request to the benchmark's scheduler (set_tq, set_gpu_memory, ...); error if refused."""
    from xpushare.protocol import CtlClient

    with CtlClient(sock) as client:
        reply = client.request(op, **fields)
    if not reply.get("ok"):
        raise RuntimeError(f"scheduler refused {op} {fields}: {reply.get('error')}")
    return reply


def footprints_in(status: dict | None, pids: Iterable[int]) -> dict[int, dict]:
    """pid -> {"bytes": managed + other, "gpu": uuid} for the clients the scheduler knows."""
    found: dict[int, dict] = {}
    wanted = set(pids)
    for client in (status or {}).get("clients", []):
        if client.get("pid") in wanted and client.get("gpus"):
            gpu = client["gpus"][0]
            found[client["pid"]] = {"bytes": int(gpu.get("managed_bytes", 0)) + int(gpu.get("other_bytes", 0)),
                                    "gpu": gpu.get("uuid")}
    return found


def gpu_budget(status: dict | None, uuid: str | None) -> int | None:
    for gpu in (status or {}).get("gpus", []):
        if gpu.get("uuid") == uuid and gpu.get("budget"):
            return int(gpu["budget"])
    return None


def ensure_separating(sock: Path, pids: list[int], capacity: int, prefix: str) -> dict:
    """Check, with the footprints the jobs reported, that one job fits the capacity and all together
    do not; if the estimate was wrong, set the capacity to one that separates them. Returns what was
    seen and done (for the results)."""
    status = scheduler_status(sock)
    seen = footprints_in(status, pids)
    check: dict[str, Any] = {"capacity": capacity, "footprints": {str(p): f["bytes"] for p, f in seen.items()}}
    if len(seen) < len(pids) or not all(f["bytes"] for f in seen.values()):
        check["note"] = "footprints not known to the scheduler: capacity left as estimated"
        return check
    sizes = [f["bytes"] for f in seen.values()]
    uuid = next(iter(seen.values()))["gpu"]
    budget = gpu_budget(status, uuid) or budget_of(capacity)
    check["budget"] = budget
    if separates(sizes, budget):
        check["separates"] = True
        return check
    better = separating_capacity(sizes)
    say(prefix, f"capacity {capacity / GIB:.2f} GiB does not separate footprints "
                f"{[round(s / GIB, 2) for s in sizes]} GiB: setting {better / GIB:.2f} GiB")
    control(sock, "set_gpu_memory", bytes=better, gpu=uuid)
    check.update(capacity=better, budget=budget_of(better), separates=separates(sizes, budget_of(better)),
                 adjusted_from=capacity)
    return check


def fit_check(sock: Path, pids: list[int], capacity: int) -> dict:
    """Whether the jobs' reported footprints fit together (mode auto should grant them all at once)."""
    status = scheduler_status(sock)
    seen = footprints_in(status, pids)
    check: dict[str, Any] = {"capacity": capacity, "footprints": {str(p): f["bytes"] for p, f in seen.items()}}
    if seen:
        uuid = next(iter(seen.values()))["gpu"]
        budget = gpu_budget(status, uuid) or budget_of(capacity)
        check.update(budget=budget, fit=fits_together([f["bytes"] for f in seen.values()], budget))
    return check


if __name__ == "__main__":
    raise SystemExit(main())
