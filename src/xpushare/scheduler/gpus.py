"""GPU discovery through NVML (nvidia-ml-py). Tolerant: without NVML the scheduler still works and
learns GPUs from its clients' ATTACH messages."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("nvshare.scheduler")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total: int  # bytes


def _str(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def discover() -> list[GpuInfo]:
    """The machine's GPUs in NVML order; [] (after one log line) when NVML is unavailable."""
    try:
        import pynvml
    except ImportError as e:
        log.info("NVML unavailable (%s); GPUs will be learnt from clients", e)
        return []
    try:
        pynvml.nvmlInit()
    except Exception as e:  # pynvml.NVMLError, or a missing libnvidia-ml.so
        log.info("NVML unavailable (%s); GPUs will be learnt from clients", e)
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(GpuInfo(index=i, uuid=_str(pynvml.nvmlDeviceGetUUID(h)),
                                name=_str(pynvml.nvmlDeviceGetName(h)),
                                memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(h).total)))
        return gpus
    except Exception as e:
        log.warning("NVML device query failed (%s); GPUs will be learnt from clients", e)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
