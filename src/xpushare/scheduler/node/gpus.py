"""GPU discovery through NVML (nvidia-ml-py), and the syntax of a GPU UUID. Tolerant: without NVML
the scheduler still works and learns GPUs from its clients' ATTACH messages (client-made GPUs:
registry.py)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger("nvshare.scheduler")

# A GPU's UUID as NVML prints it and libnvshare.so formats CUDA's 16 bytes: "GPU-" and the 8-4-4-4-12
# hex form; a MIG device's as NVML prints it since driver R470 ("MIG-" and the same form; the older
# "MIG-GPU-<uuid>/<gi>/<ci>" names are not accepted). Hex digits of either case.
_UUID = re.compile(r"(GPU|MIG)-[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def valid_uuid(uuid: str) -> bool:
    """Whether `uuid` has the syntax of a GPU or MIG device UUID (what ATTACH may name)."""
    return _UUID.fullmatch(uuid) is not None


def uuid_key(uuid: str) -> str:
    """The registry's key for a UUID: hex digits of either case name the same device."""
    return uuid.lower()


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
