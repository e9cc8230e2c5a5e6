"""A scheduler daemon for the CPU benchmarks (load, soak): `python -m xpushare.scheduler --no-nvml`
on a private socket, configured as in production (no --log-locks: a grant and a release cost no log
line), its output in a log file, and what those benchmarks read of it: RSS and log problems.

The open-file limit: raise_nofile() raises this process's soft RLIMIT_NOFILE to the hard limit, and
the daemon is started with the same done before exec (it would also raise its own at start), so that
a thousand clients and the daemon's thousand connections fit.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.core import common  # noqa: F401  (xpushare from src/ when it is not installed)
from bench.core.protoclient import children_can_import_xpushare
from testkit.waiting import stop_process

FAKE_NVML = Path(__file__).resolve().parents[2] / "tests" / "scheduler" / "fake_nvml"
PROBLEMS = ("Traceback", "internal error")  # log lines a daemon that works correctly never writes


def checkouts(specs: list[str]) -> list[tuple[str, Path]]:
    """--tree NAME=PATH options as (NAME, PATH/src): other checkouts whose schedulers a comparison
    runs beside this tree's (Daemon(src=...))."""
    out = []
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not (eq and name and path):
            raise SystemExit(f"--tree wants NAME=PATH: {spec!r}")
        out.append((name, Path(path) / "src"))
    return out


def alternating_rounds(items: list, rounds: int):
    """(round, item) for every round and item, the order reversed every other round, so that
    drift (a warmer machine, a busier neighbour) does not favour whichever goes first."""
    for r in range(rounds):
        for item in (items if r % 2 == 0 else items[::-1]):
            yield r, item


def report_trees(out: dict, path) -> int:
    """The end of a comparison of checkouts: each tree's summary printed, and the whole result
    written as JSON to `path` when one was given. Returns the exit status (0)."""
    print(json.dumps(out["trees"], indent=1))
    if path:
        path.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def raise_nofile() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE raised to the hard limit; (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def rss_kib(pid: int) -> int | None:
    """VmRSS of `pid` in KiB (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class Daemon:
    """nvshare-scheduler in a fresh directory under /tmp (socket paths must be short), started at
    construction and stopped (and its directory removed) by stop() or on leaving a with block."""

    def __init__(self, mode: str, gpu_memory: str = "16GiB", extra: tuple[str, ...] = (),
                 ready_timeout: float = 20.0, src: Path | None = None,
                 python_args: tuple[str, ...] = (), nvml: list[dict] | None = None) -> None:
        """src: the package sources to run (another checkout's src/, for a baseline measured in
        the same run); python_args: before `-m xpushare.scheduler` (e.g. a profiler's); nvml: the
        GPUs the tests' fake pynvml reports ({"uuid", "name", "memory"}), instead of --no-nvml."""
        children_can_import_xpushare()
        env = None
        if src is not None or nvml is not None:
            paths = [str(src)] if src is not None else [os.environ.get("PYTHONPATH", "")]
            if nvml is not None:
                paths.insert(0, str(FAKE_NVML))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p),
                   "FAKE_NVML_GPUS": json.dumps(nvml or [])}
        self.dir = Path(tempfile.mkdtemp(prefix="nvs-", dir="/tmp"))
        self.socket = self.dir / "s.sock"
        self.log_path = self.dir / "scheduler.log"
        self._saved_log: str | None = None
        self.argv = [sys.executable, *python_args, "-m", "xpushare.scheduler",
                     *(["--no-nvml"] if nvml is None else []), "--gpu-memory", gpu_memory,
                     "--socket", str(self.socket), "--mode", mode, *extra]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=raise_nofile, env=env)
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited with {self.proc.returncode}:\n{self.log()[-2000:]}")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(str(self.socket))
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"the scheduler did not answer on {self.socket} within {timeout:.0f} s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kib(self) -> int | None:
        return rss_kib(self.proc.pid)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the daemon has used so far: the nanoseconds its threads
        ran (/proc/PID/task/*/schedstat), else /proc/PID/stat's clock ticks (10 ms each: a
        tenth of what 1000 registrations take)."""
        pid, ran = self.proc.pid, 0
        if os.path.exists(f"/proc/{pid}/schedstat"):
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        ran += int(f.read().split()[0])
                except (OSError, ValueError, IndexError):
                    pass  # a thread that ended meanwhile
            return ran / 1e9
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log(self) -> str:
        """Its log (after stop(), what it held when the directory was removed)."""
        if self._saved_log is not None:
            return self._saved_log
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def problems(self) -> dict[str, int]:
        """How many log lines hold each of PROBLEMS."""
        lines = self.log().splitlines()
        return {p: sum(p in line for line in lines) for p in PROBLEMS}

    def stop(self) -> int | None:
        """SIGTERM (SIGKILL after 10 s); the exit status; the directory is removed."""
        stop_process(self.proc, group=True)
        if self._saved_log is None:
            self._saved_log = self.log()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
