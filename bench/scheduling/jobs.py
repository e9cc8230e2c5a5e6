"""The benchmark side of the job program (bench/scheduling/job_program.py), imported by makespan.py and interactive.py.

JobGroup starts job processes with their environments (natively or under libnvshare.so), waits for
READY, sends commands and collects results, and ends every process it started when it closes (also on
errors and timeouts; each job also dies with the benchmark process, PR_SET_PDEATHSIG). Also here: the
job's size, a round's makespan and the summaries and correctness check of results. The scheduler's log
is read in schedlog.py, the GPU memory rules are in gpu_memory.py.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/
REPO = BENCH.parent

from bench.core.gpu_memory import CLIENT_VIRTUAL_CAPACITY  # noqa: E402
from bench.scheduling.job_program import (CLASSES, DATA_POOL, EXIT_COMMAND, GIB, MIB, parse_output_line,  # noqa: E402
                         train_command)
from bench.core.schedlog import ms  # noqa: E402
from bench.core.stats import median, percentile  # noqa: E402

START_MARGIN_S = 0.5  # a round starts this long after its commands are sent: every job is waiting by then


class JobFailed(RuntimeError):
    """A job process exited, timed out or answered something unexpected."""


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
    argv = [sys.executable, str(BENCH / "scheduling" / "job_program.py"), *size.args(), *extra]
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
        "p90_step_ms": ms(percentile(times, 90)), "max_step_ms": ms(max(times, default=None)),
        "slow_steps": [[i, round(t * 1e3, 3)] for i, t in sorted(slow)],
        "final_loss": result.get("final_loss"),
        "resident_ok": (result.get("resident") or {}).get("ok", True),
    }


def correctness(summaries: Iterable[dict], same_work: bool = True) -> dict:
    """Train commands of the same number of steps compute the same: one final loss (same_work);
    in any case the loss is finite and all elements of the working set agree."""
    items = list(summaries)
    losses = sorted({s["final_loss"] for s in items if s.get("final_loss") is not None})
    bad_resident = [s["pid"] for s in items if not s.get("resident_ok", True)]
    finite = all(math.isfinite(v) for v in losses)
    return {"final_losses": losses, "working_set_bad_pids": bad_resident,
            "ok": finite and not bad_resident and (len(losses) <= 1 or not same_work)}
