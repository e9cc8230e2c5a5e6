"""NVML's own readings for the metrics: each GPU's memory in use and utilization, read at scrape
time (the exporter's GpuRow carries them, metrics_collect.py)."""

from __future__ import annotations

import logging

log = logging.getLogger("nvshare.scheduler")


class NvmlReader:
    """Memory in use and utilization of NVML's GPUs, read at scrape time: a driver call each, some
    microseconds. NVML is initialised when the exporter starts (open), since a first nvmlInit can
    take long enough to be felt by clients. An error there, or in reading memory, ends NVML series
    for good (one log line): an exporter that fails each scrape helps nobody. Utilization is left
    out alone where NVML does not offer it (MIG devices)."""

    def __init__(self):
        self._nvml = None
        self._handles: dict[int, object] = {}

    def open(self) -> None:
        try:
            import pynvml
            pynvml.nvmlInit()
        except Exception as e:  # pynvml.NVMLError, a missing library or module
            log.info("metrics: NVML unavailable (%s); no NVML series", e)
            return
        self._nvml = pynvml

    def read(self, index: int) -> tuple[int, float | None] | None:
        nvml = self._nvml
        if nvml is None:
            return None
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
            used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception as e:  # pynvml.NVMLError: the GPU is gone, the driver unloaded
            log.warning("metrics: NVML cannot be read (%s); no NVML series from now on", e)
            self._nvml = None
            return None
        try:
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
        except Exception:
            utilization = None
        return used, utilization
