"""The processes of bench/switching/swap.py: the inference-like servers under the library (their
stdin/stdout protocol and the library's debug lines they write), the pinned reference copies, and
the filler that makes the capacity real. Split from swap.py, which runs them."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.core import common
from bench.core.common import harness

SERVER = common.BENCH / "switching" / "swap_server.py"
EVICTED = re.compile(r"evicted \d+ range\(s\), (\d+) bytes, to the swap store \((\d+) of them clean: "
                     r"discarded without a copy\) and \d+ range\(s\), (\d+) bytes, by prefetch to the "
                     r"host in ([\d.]+) ms")
SWAPPED_IN = re.compile(r"swap-in of \d+ range\(s\), (\d+) bytes, and prefetch of \d+ range\(s\), "
                        r"(\d+) bytes, to the device done in ([\d.]+) ms")
# NVSHARE_DEBUG's line after the pinner's pass (native/src/swap/swaphost.c): N MiB pinned ahead of a
# swap-out (PREPARE_SWAP on), 0 when it pinned none of its own ranges ahead
PINNED_AHEAD = re.compile(r"host copies pinned \((\d+) MiB of them ahead of a swap-out")


class Server:
    def __init__(self, name: str, gib: int, env: dict, seed: int, rewrite: bool,
                 wait_before_load: bool = False) -> None:
        """Started; with wait_before_load only its CUDA context (the library attached, `attached_at`
        its monotonic time) until load() is called, else with its weights loaded."""
        self.name = name
        self.n = 0  # requests answered: with --rewrite, responses alternate by parity
        self.err_path = Path(tempfile.mkstemp(prefix=f"swap-{name}-", suffix=".log")[1])
        self._err = open(self.err_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--gib", str(gib), "--seed", str(seed),
                                      *(["--rewrite"] if rewrite else []),
                                      *(["--wait-before-load"] if wait_before_load else [])],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, start_new_session=True)
        self._seen = 0
        self.rewrite = rewrite
        self.resident_sha: dict[int, str] = {}  # parity -> the resident response
        self.attached_at: float | None = None
        self.load_ms: float | None = None
        if wait_before_load:
            self._expect("ATTACHED", "did not start")
            self.attached_at = time.monotonic()
        else:
            self.load_ms = float(self._expect("READY", "did not start")[1])

    def _expect(self, word: str, what: str) -> list[str]:
        line = self.proc.stdout.readline().split()
        if not line or line[0] != word:
            raise RuntimeError(f"server {self.name} {what}: {self.err_path.read_text()[-2000:]}")
        return line

    def load(self) -> None:
        """A server started with wait_before_load: allocate and fill its weights now."""
        self.proc.stdin.write("load\n")
        self.proc.stdin.flush()
        self.load_ms = float(self._expect("READY", "did not load")[1])

    def pinned_ahead_mib(self) -> int:
        """The most MiB one pass of its pinner has logged as pinned ahead of a swap-out so far."""
        return max(map(int, PINNED_AHEAD.findall(self.err_path.read_text(errors="replace"))), default=0)

    def request(self, rid: int) -> tuple[float, bool]:
        """(ms, whether the response equals the resident one of its parity)."""
        self.proc.stdin.write(f"req {rid}\n")
        self.proc.stdin.flush()
        words = self.proc.stdout.readline().split()
        if len(words) != 4 or words[0] != "done":
            raise RuntimeError(f"server {self.name} failed: {self.err_path.read_text()[-2000:]}")
        parity = self.n % 2 if self.rewrite else 0
        self.n += 1
        same = self.resident_sha.setdefault(parity, words[3]) == words[3]
        return float(words[2]), same

    def moves(self) -> tuple[list[tuple[int, int, float]], list[tuple[int, float]]]:
        """(evictions, swap-ins) logged since the last call: (bytes, of them copied, ms) and
        (bytes, ms). An eviction copies what has no valid host copy; the rest is discarded."""
        text = self.err_path.read_text(errors="replace")
        new, self._seen = text[self._seen:], len(text)
        out = [(int(a) + int(b), int(a) - int(c) + int(b), float(ms))
               for a, c, b, ms in EVICTED.findall(new)]
        back = [(int(a) + int(b), float(ms)) for a, b, ms in SWAPPED_IN.findall(new)]
        return out, back

    def wait_pinned(self, timeout: float = 120.0) -> None:
        """Until the library says its host copies are pinned (NVSHARE_DEBUG's line)."""
        deadline = time.monotonic() + timeout
        while "host copies pinned" not in self.err_path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {self.name}: host copies not pinned in {timeout:.0f} s")
            time.sleep(0.1)

    def stop(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self._err.close()


def reference(gib: int, timeout: float = 300) -> tuple[float, float]:
    """Pinned host->device and device->host copies of gib GiB, natively (seconds each)."""
    out = subprocess.run([sys.executable, str(SERVER), "--reference", str(gib)], env=harness.native_env(),
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"the pinned copies failed (exit {out.returncode}): {out.stderr.strip()[-400:]}")
    _, h2d, d2h = out.stdout.split()
    return float(h2d), float(d2h)


FILLER = r'''
import sys, torch
keep = int(sys.argv[1])
free, _ = torch.cuda.mem_get_info()
x = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("READY", torch.cuda.mem_get_info()[0], flush=True)
sys.stdin.read()
'''


class Filler:
    """A process outside the library that holds all of the GPU's free memory but `keep` bytes."""

    def __init__(self, keep: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", FILLER, str(keep)], env=harness.native_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        words = self.proc.stdout.readline().split()
        if not words or words[0] != "READY":
            raise RuntimeError("the filler did not start")
        self.free_after = int(words[1])

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def gpu_memory_now() -> tuple[int | None, dict[int, int]]:
    """The GPU's free MiB and each process's used MiB, as nvidia-smi says."""
    def query(*args: str) -> list[str]:
        out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip().splitlines() if out.returncode == 0 else []
    free = query("--query-gpu=memory.free", "-i", "0")
    apps = {}
    for ln in query("--query-compute-apps=pid,used_memory"):
        pid, _, used = ln.partition(",")
        if pid.strip().isdigit() and used.strip().isdigit():
            apps[int(pid)] = int(used)
    return (int(free[0]) if free else None), apps
