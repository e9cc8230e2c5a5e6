"""The GPU's SM clock, power draw and utilisation while a benchmark runs, sampled with nvidia-smi.

A GPU-time limit gives a saturating program a little more throughput than its share of the time: a
GPU that is busy only part of the time runs at a higher clock (it is not held at its power cap), so
every product it runs is faster. The samples show it beside the throughput.

    sampler = ClockSampler(gpu_index)     # None argv (no nvidia-smi): it samples nothing
    sampler.start(); ...; sampler.stop()
    means(sampler.samples, t_from, t_to)  # {"sm_mhz", "power_w", "util_pct", "samples"}

Each line carries nvidia-smi's own timestamp, and each sample is placed on time.monotonic() by it,
not by when the line reached this process: a pipe may hand lines over late and in bursts.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from datetime import datetime

PERIOD_MS = 50
FIELDS = ("sm_mhz", "power_w", "util_pct")
QUERY = "timestamp,clocks.sm,power.draw,utilization.gpu"
STAMP = "%Y/%m/%d %H:%M:%S.%f"


def smi_argv(gpu_index: int, smi: str | None = None) -> list[str] | None:
    """The sampling command for one GPU, None when nvidia-smi is not on the PATH."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return None
    return [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", str(PERIOD_MS),
            "-i", str(gpu_index)]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_line(line: str, wall_to_mono: float, arrival: float) -> dict | None:
    """One CSV line (timestamp, SM MHz, W, %) as {"t", "sm_mhz", "power_w", "util_pct"}, with "t"
    on the monotonic clock (wall time + wall_to_mono); arrival is used when the stamp cannot be read.
    None for a line that is not a sample (nvidia-smi's messages)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 1 + len(FIELDS):
        return None
    values = [_number(p) for p in parts[1:]]
    if all(v is None for v in values):
        return None
    try:
        t = datetime.strptime(parts[0], STAMP).timestamp() + wall_to_mono
    except ValueError:
        t = arrival
    return {"t": t, **dict(zip(FIELDS, values))}


def means(samples: list[dict], t_from: float, t_to: float) -> dict:
    """The mean of each field over the samples with t_from <= t <= t_to (None where none has it)."""
    inside = [s for s in samples if t_from <= s["t"] <= t_to]
    out: dict = {"samples": len(inside)}
    for key in FIELDS:
        values = [s[key] for s in inside if s.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


class ClockSampler:
    """nvidia-smi in the background, its lines read by a thread into `samples`."""

    def __init__(self, argv: list[str] | None):
        self.argv = argv
        self.samples: list[dict] = []
        self._proc = None
        self._thread = None

    def start(self) -> ClockSampler:
        if self.argv is None:
            return self
        # The offset from wall time to the monotonic clock: nvidia-smi stamps in local wall time.
        offset = time.monotonic() - time.time()
        self._proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      stdin=subprocess.DEVNULL, text=True)

        def follow():
            for line in self._proc.stdout:
                sample = parse_line(line, offset, time.monotonic())
                if sample is not None:
                    self.samples.append(sample)
        self._thread = threading.Thread(target=follow, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._thread.join(5)
        self._proc = None

    def window(self, t_from: float, t_to: float) -> dict:
        """Means over [t_from, t_to]; all None without nvidia-smi (the report leaves them blank)."""
        return means(self.samples, t_from, t_to)

    def __enter__(self) -> ClockSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
