"""A real scheduler process for the CPU suites: `python -m xpushare.scheduler` on a private socket,
its output in a log file, the control protocol (status) for what a test checks.

tests/interposer (harness.Scheduler) and tests/scheduler (sched_harness.SchedulerProcess) build on
this class; they only choose the arguments and the environment. testkit.gpu.Scheduler, for the GPU
suite and bench/, starts at construction and stamps each log line with its arrival time instead.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from testkit.waiting import poll, stop_process


class SchedulerProcess:
    def __init__(self, sock: Path, args=(), env: dict | None = None, log_path: Path | None = None):
        """args: scheduler options besides --socket; env: its whole environment (None: ours).
        Grants and releases are logged (--log-locks): tests read them as the scheduler's events."""
        self.sock = Path(sock)
        self.args = ["--socket", str(self.sock), "--log-locks", *map(str, args)]
        self.env = env
        self.log_path = Path(log_path) if log_path else self.sock.parent / f"{self.sock.name}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.sock

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, wait: bool = True, timeout: float = 20.0) -> "SchedulerProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "xpushare.scheduler", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Until it answers a status request (or fail, with its log, if it exits first)."""
        poll(self._answers, timeout, 0.05, what=f"the scheduler to answer on {self.sock}",
             abort=lambda: not self.alive())
        assert self.alive(), f"the scheduler exited with {self.proc.returncode}:\n{self.log()}"

    def _answers(self) -> bool:
        try:
            return bool(self.ctl("status").get("ok"))
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)

    def stop(self) -> int:
        """SIGTERM (SIGKILL after 10 s); its exit status (0 if it never started)."""
        if self.proc is None:
            return 0
        return stop_process(self.proc)

    # -- its log -------------------------------------------------------------------------------
    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, text: str, timeout: float = 10.0) -> str:
        """The whole log, once it holds `text`."""
        return poll(lambda: text in self.log() and self.log(), timeout, what=f"log line {text!r}")

    # -- the control protocol ------------------------------------------------------------------
    def ctl(self, op: str, **fields) -> dict:
        from xpushare.cli.client import CtlClient
        with CtlClient(self.sock, timeout=5.0) as c:
            return c.request(op, **fields)

    def status(self) -> dict:
        reply = self.ctl("status")
        assert reply.get("ok"), reply
        return reply

    def client(self, pid: int) -> dict | None:
        return next((c for c in self.status()["clients"] if c["pid"] == pid), None)

    def client_pids(self) -> set[int]:
        return {c["pid"] for c in self.status()["clients"]}

    def gpu(self, uuid: str) -> dict | None:
        return next((g for g in self.status()["gpus"] if g["uuid"] == uuid), None)

    def holders(self, uuid: str | None = None) -> set[int]:
        return {h["pid"] for g in self.status()["gpus"] if uuid is None or g["uuid"] == uuid
                for h in g["holders"]}

    def queue(self, uuid: str | None = None) -> list[int]:
        return [p for g in self.status()["gpus"] if uuid is None or g["uuid"] == uuid for p in g["queue"]]

    def wait_holder(self, pid: int, uuid: str | None = None, timeout: float = 15.0) -> None:
        poll(lambda: pid in self.holders(uuid), timeout, what=f"pid {pid} to hold the lock")

    def wait_client(self, pid: int, timeout: float = 15.0) -> dict:
        return poll(lambda: self.client(pid), timeout, what=f"pid {pid} to register")

    def wait_held_for(self, seconds: float, gpu: int = 0) -> dict:
        """Until the scheduler itself reports GPU `gpu`'s first holder as holding for `seconds`
        (any timer of the grant due before then has fired); returns that holder's status."""
        return poll(lambda: next((h for h in self.status()["gpus"][gpu]["holders"]
                                  if h["held_for"] >= seconds), None),
                    timeout=seconds + 15, what=f"a holder to hold for {seconds} s")
