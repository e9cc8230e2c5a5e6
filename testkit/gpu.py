"""Run programs natively or under libnvshare.so with a scheduler of their own, and read what happened.

Shared by tests/gpu and bench/. Only the standard library is imported
here, so that collecting tests/gpu on a machine without a GPU costs nothing.

GPU safety (binding on the lent GPU machine): under libnvshare.so every cudaMalloc becomes managed
memory, and asking the card for more managed memory than it has free can hang it. So every process run
under the library here gets NVSHARE_GPU_MEMORY (a virtual capacity of 16 GiB, which is also its
allocation cap), the programs allocate at most a few GiB, and `gpu_headroom_problem()` refuses to run
on a card that has too little free memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from testkit.waiting import poll, stop_process

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
PROGRAMS = REPO / "tests" / "gpu" / "programs"

GIB = 1 << 30
MIB = 1 << 20
VIRTUAL_CAPACITY = "16GiB"  # NVSHARE_GPU_MEMORY of every process run under the library
VIRTUAL_CAPACITY_BYTES = 16 * GIB
# What must be free on the card before GPU work runs (min_free_mib): 32 GiB, or three quarters of
# a card smaller than about 43 GiB. The tests hold a few GiB at once (each program at most about
# 3 GiB with its context; the capacities they see are virtual); the rest is headroom, and less free
# than that means someone else is using the GPU.
MIN_FREE_GPU_MIB = 32 * 1024
MIN_FREE_SHARE = 0.75
RESULT_PREFIX = "RESULT "  # programs in tests/gpu/programs print their findings on such a line


# ----------------------------------------------------------------------------- the machine

def gpu_present() -> bool:
    """An NVIDIA GPU and its driver are there (checked without initialising CUDA in this process)."""
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return True  # device nodes but no nvidia-smi (some containers): let the programs find out
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU " in out.stdout


def visible_gpu_index() -> int:
    """nvidia-smi's index of the GPU that CUDA calls device 0 here."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def gpu_memory_mib() -> tuple[int, int] | None:
    """(free, total) MiB of the GPU the programs will use, from nvidia-smi; None if unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, f"--id={visible_gpu_index()}", "--query-gpu=memory.free,memory.total",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        free, total = (int(v) for v in out.stdout.strip().splitlines()[0].split(","))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    return free, total


def min_free_mib(total_mib: int) -> int:
    """The free memory (MiB) a card of `total_mib` needs before GPU work runs on it."""
    return min(MIN_FREE_GPU_MIB, int(total_mib * MIN_FREE_SHARE))


def gpu_headroom_problem() -> str | None:
    """Why it is not safe to run GPU work now, or None when it is."""
    mem = gpu_memory_mib()
    if mem is None:
        return None
    free, total = mem
    need = min_free_mib(total)
    if free < need:
        return (f"only {free} MiB of {total} MiB GPU memory is free (need {need} MiB: 32 GiB, or "
                f"3/4 of a card smaller than 43 GiB): someone else is using the GPU")
    return None


def library_path() -> Path:
    """The libnvshare.so under test: $NVSHARE_LIBRARY, else the copy in the package xpushare is
    imported from, else (tests/conftest.py puts the source tree, which has no built library, first on
    sys.path) the installed package's copy, as `nvshare-run --print-lib` tells."""
    from xpushare.wire.paths import library_path as find

    try:
        return find()
    except FileNotFoundError:
        launcher = shutil.which("nvshare-run")
        if launcher is None:
            raise
        out = subprocess.run([launcher, "--print-lib"], capture_output=True, text=True, timeout=60, cwd="/")
        path = Path(out.stdout.strip())
        if out.returncode != 0 or not path.is_file():
            raise
        return path


# ----------------------------------------------------------------------------- environments

def native_env(**extra: object) -> dict[str, str]:
    """This process's environment without the library and without any NVSHARE_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHARE_") or k == "NVSHARE_LIBRARY"}
    preload = [p for p in env.pop("LD_PRELOAD", "").split(":") if p and "libnvshare" not in p]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    # PyTorch's allocator on plain cudaMalloc (what the library converts), in both kinds of run, so
    # that only the library differs between them.
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:False"
    env.pop("PYTORCH_ALLOC_CONF", None)  # its newer name, which PyTorch reads first
    env["PYTHONUNBUFFERED"] = "1"
    # NCCL's NVLink SHARP (NVLS) reserves multicast memory on every GPU of the host: never in
    # our multi-GPU runs on a shared machine, unless the caller's environment asks for it.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def library_env(lib: Path, sock: Path | None, *, gpu_memory: str = VIRTUAL_CAPACITY,
                **extra: object) -> dict[str, str]:
    """The environment nvshare-run would give: LD_PRELOAD, the socket, a virtual capacity, and the
    allocator settings that keep PyTorch and JAX on allocations the library can convert."""
    if not gpu_memory:
        raise ValueError("every process under the library needs NVSHARE_GPU_MEMORY (GPU safety)")
    env = native_env()
    env["LD_PRELOAD"] = ":".join([str(lib), *filter(None, [env.get("LD_PRELOAD")])])
    env["NVSHARE_GPU_MEMORY"] = gpu_memory
    if sock is not None:
        env["NVSHARE_SOCK_PATH"] = str(sock)
    env["XLA_PYTHON_CLIENT_ALLOCATOR"] = "platform"  # cudaMalloc on demand, not a VMM reservation
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def python_cmd(script: Path | str, *args: object) -> list[str]:
    return [sys.executable, str(script), *map(str, args)]


# ----------------------------------------------------------------------------- processes

@dataclass
class Run:
    """A finished program."""

    argv: list[str]
    pid: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def result(self) -> dict | None:
        """The JSON of the last "RESULT {...}" line on stdout, if any."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(RESULT_PREFIX):
                return json.loads(line[len(RESULT_PREFIX):])
        return None

    def describe(self, tail: int = 4000) -> str:
        return (f"$ {' '.join(self.argv)}\n[pid {self.pid}, exit {self.returncode}, "
                f"{self.seconds:.1f}s]\n--- stdout (tail) ---\n{self.stdout[-tail:]}\n"
                f"--- stderr (tail) ---\n{self.stderr[-tail:]}")

    def check(self) -> Run:
        assert self.returncode == 0, f"program failed\n{self.describe()}"
        return self


class Program:
    """A program started in its own session (so a timeout kills its workers too), with its output
    going to files (so a chatty process never blocks on a full pipe while we wait on another)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.argv = argv
        self._out = tempfile.TemporaryFile("w+")
        self._err = tempfile.TemporaryFile("w+")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd or REPO, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=self._err, text=True,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> Run:
        """Wait for the program; on timeout kill its process group and fail with its output.
        Whatever happens, nothing of its group is left running (e.g. DataLoader workers)."""
        timed_out = False
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on KeyboardInterrupt or a pytest-timeout interruption
            self._kill_group()
            self.proc.wait()
        run = Run(self.argv, self.proc.pid, self.proc.returncode, _read(self._out), _read(self._err),
                  time.monotonic() - self.started)
        self._out.close()
        self._err.close()
        assert not timed_out, f"program timed out after {timeout:.0f}s\n{run.describe()}"
        return run

    def stop(self) -> None:
        """End it (and its group) if it still runs; a no-op after wait()."""
        if self.proc.poll() is None:
            self._kill_group()
            self.proc.wait()


def _read(f) -> str:
    f.seek(0)
    return f.read()


def run(argv: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> Run:
    return Program(argv, env, cwd).wait(timeout)


def check_shared(shared: Run, timeout: float, native_environment: dict[str, str] | None = None) -> Run:
    """Assert that a run under the library succeeded; when it did not, run the same command natively
    too (in `native_environment`, the test's own: its framework settings, and a JAX or
    PyTorch that would otherwise preallocate most of the card; default native_env()), so the
    failure says whether the library or the machine's setup is at fault."""
    if shared.returncode == 0:
        return shared
    argv = shared.argv
    if Path(argv[0]).name == "nvshare-run":  # the program itself, without the launcher
        argv = argv[argv.index("--") + 1:]
    try:
        native = run(argv, native_environment if native_environment is not None else native_env(), timeout)
        verdict = ("it passes natively: the library breaks it" if native.returncode == 0
                   else "it fails natively too: a setup problem, not the library")
        native_text = native.describe()
    except AssertionError as e:  # the native rerun timed out
        verdict, native_text = "the native rerun timed out", str(e)
    raise AssertionError(f"failed under libnvshare.so; {verdict}\n=== under the library ===\n"
                         f"{shared.describe()}\n=== natively ===\n{native_text}")


# ----------------------------------------------------------------------------- the scheduler

EVENT_RE = re.compile(r"\b(grant|drop|release|disconnect) pid=(\d+)(.*)$")


@dataclass
class Event:
    """One scheduler log line about a client: grant, drop, release or disconnect."""

    t: float  # time.monotonic() when the line reached us (CLOCK_MONOTONIC is system-wide)
    kind: str
    pid: int
    fields: dict[str, str] = field(default_factory=dict)


class Scheduler:
    """`python -m xpushare.scheduler` on a private socket. Its log lines are read as they are written
    and stamped with their arrival time, so that they can be lined up with the programs' own clocks."""

    def __init__(self, workdir: Path | None = None, *, mode: str = "off", tq: float = 30.0,
                 extra_args: tuple[str, ...] = (), ready_timeout: float = 30.0,
                 log_locks: bool = True) -> None:
        """Start it in `workdir`, or in a fresh short temporary directory removed again by stop().
        log_locks: --log-locks, the grant and release lines the benchmarks read as events (off
        for a benchmark that times the scheduler itself)."""
        self._own_dir = workdir is None
        workdir = short_tempdir() if workdir is None else workdir
        self.workdir = workdir
        self.socket = workdir / "scheduler.sock"
        self.log_path = workdir / "scheduler.log"
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        argv = [sys.executable, "-m", "xpushare.scheduler", "--socket", str(self.socket),
                "--mode", mode, "--tq", f"{tq:g}", *(["--log-locks"] if log_locks else []), *extra_args]
        self.proc = subprocess.Popen(argv, env=native_env(), cwd=workdir, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._follow, daemon=True)
        self._reader.start()
        self._wait_ready(ready_timeout)

    def _follow(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.proc.stderr:
                now = time.monotonic()
                log.write(line)
                log.flush()
                with self._lock:
                    self.lines.append((now, line.rstrip("\n")))

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(self.socket))
                return True
            except OSError:
                return False

    def _wait_ready(self, timeout: float) -> None:
        try:
            ready = poll(self._answers, timeout, 0.05, what=f"the scheduler to answer on {self.socket}",
                         abort=lambda: self.proc.poll() is not None)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"scheduler did not answer on {self.socket} within {timeout:.0f}s:\n"
                               f"{self.log()}") from None
        if not ready:
            self.stop()
            raise RuntimeError(f"scheduler exited with {self.proc.returncode}:\n{self.log()}")

    def log(self) -> str:
        with self._lock:
            return "\n".join(line for _, line in self.lines)

    def events(self, kind: str | None = None, pids: set[int] | None = None) -> list[Event]:
        with self._lock:
            lines = list(self.lines)
        found = []
        for t, line in lines:
            m = EVENT_RE.search(line)
            if m is None or (kind is not None and m.group(1) != kind):
                continue
            pid = int(m.group(2))
            if pids is None or pid in pids:
                found.append(Event(t, m.group(1), pid, dict(re.findall(r"(\w+)=(\S+)", m.group(3)))))
        return found

    def stop(self) -> None:
        stop_process(self.proc, group=True)
        self._reader.join(5)
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def short_tempdir(prefix: str = "nvs-") -> Path:
    """A directory with a short path: a Unix socket path must fit in 108 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


# ----------------------------------------------------------------------------- reading results

def turns(pids_in_order: list[int]) -> list[tuple[int, int]]:
    """Collapse a sequence of pids into (pid, how many in a row) runs: [1,1,2,1] -> [(1,2),(2,1),(1,1)]."""
    runs: list[tuple[int, int]] = []
    for pid in pids_in_order:
        if runs and runs[-1][0] == pid:
            runs[-1] = (pid, runs[-1][1] + 1)
        else:
            runs.append((pid, 1))
    return runs


DEBUG_LINE_RE = re.compile(r"^nvshare\[(\d+)\]: (.*)$")


def debug_lines(stderr: str, pid: int | None = None) -> list[str]:
    """The library's NVSHARE_DEBUG lines ("nvshare[PID]: ...") in a program's stderr."""
    found = []
    for line in stderr.splitlines():
        m = DEBUG_LINE_RE.match(line)
        if m and (pid is None or int(m.group(1)) == pid):
            found.append(m.group(2))
    return found
