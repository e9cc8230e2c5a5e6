"""NVML's per-process GPU utilisation samples, summed into busy seconds per pid: the cross-check that
bench/observability/busy_accuracy.py sets beside the library's measurement (what dcgm-exporter reports per
process). The driver samples which process ran kernels; each sample says, in percent, how much of the
time since the one before its process had a kernel running."""

from __future__ import annotations

import threading

POLL_S = 0.1


class ProcessBusy(threading.Thread):
    """Polls nvmlDeviceGetProcessUtilization for GPU `index` until stop(); busy(pid, t0, t1) sums
    smUtil x the time since that pid's previous sample, over samples stamped within [t0, t1] (host
    CLOCK_REALTIME seconds, as NVML stamps them)."""

    def __init__(self, index: int = 0):
        super().__init__(daemon=True)
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.samples: dict[int, list[tuple[float, float]]] = {}  # pid -> [(time s, busy s)]
        self._last: dict[int, int] = {}
        self._seen = 0
        self._halt = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        while not self._halt.wait(POLL_S):
            try:
                got = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, self._seen)
            except self.nvml.NVMLError_NotFound:
                continue
            except self.nvml.NVMLError as e:  # not supported here: say so in the result
                self.error = str(e)
                return
            for s in sorted(got, key=lambda s: s.timeStamp):
                self._seen = max(self._seen, s.timeStamp)
                prev = self._last.get(s.pid)
                if prev is not None and s.timeStamp > prev:
                    self.samples.setdefault(s.pid, []).append(
                        (s.timeStamp / 1e6, s.smUtil / 100 * (s.timeStamp - prev) / 1e6))
                if prev is None or s.timeStamp > prev:
                    self._last[s.pid] = s.timeStamp

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def busy(self, pid: int, t0: float, t1: float) -> float | None:
        if self.error:
            return None
        return sum(b for t, b in self.samples.get(pid, []) if t0 <= t <= t1)
