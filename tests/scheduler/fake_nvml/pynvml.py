"""A stand-in for nvidia-ml-py's pynvml, for tests only: the devices come from $FAKE_NVML_GPUS, a
JSON list of {"uuid", "name", "memory"}; $FAKE_NVML_FAIL makes nvmlInit fail."""

import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _gpus():
    return json.loads(os.environ.get("FAKE_NVML_GPUS", "[]"))


def nvmlInit():
    if os.environ.get("FAKE_NVML_FAIL"):
        raise NVMLError("Driver Not Loaded")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(i):
    return _gpus()[i]


def nvmlDeviceGetUUID(h):
    return h["uuid"]


def nvmlDeviceGetName(h):
    return h["name"].encode()  # older pynvml returns bytes


def nvmlDeviceGetMemoryInfo(h):
    return SimpleNamespace(total=h["memory"], free=h["memory"], used=0)
