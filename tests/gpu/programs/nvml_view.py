"""What NVML reports about GPU memory inside a process, next to what CUDA reports.

Initialises CUDA through PyTorch (CuPy when PyTorch is missing), reads cuMemGetInfo (through the
framework), then nvmlDeviceGetMemoryInfo and nvmlDeviceGetMemoryInfo_v2 for the same GPU (found by
UUID), then cuMemGetInfo again. NVML is reached through pynvml when it imports, else through
ctypes on libnvidia-ml.so.1 (both end in dlsym on a dlopen handle, as pynvml does).
"""

from __future__ import annotations

import ctypes

from progutil import emit, library_loaded


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def cuda_side():
    """(mem_get_info function, the UUID of CUDA device 0 as NVML spells it, framework name)."""
    try:
        import torch

        torch.zeros(1, device="cuda")
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        if not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
        return torch.cuda.mem_get_info, uuid, "torch"
    except ImportError:
        import cupy

        cupy.zeros(1)
        props = cupy.cuda.runtime.getDeviceProperties(0)
        raw = bytes(props["uuid"])
        h = raw.hex()
        uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        return cupy.cuda.runtime.memGetInfo, uuid, "cupy"


def nvml_pynvml(uuid: str):
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)
    m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    out = {"via": "pynvml", "total1": m1.total, "free1": m1.free, "used1": m1.used}
    try:
        m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        out.update(total2=m2.total, reserved2=m2.reserved, free2=m2.free, used2=m2.used)
    except (TypeError, AttributeError, pynvml.NVMLError) as e:  # an old pynvml, or no v2 in the driver
        out["v2_error"] = repr(e)
    return out


def nvml_ctypes(uuid: str):
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    h = ctypes.c_void_p()
    r = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(h))
    assert r == 0, f"nvmlDeviceGetHandleByUUID({uuid}) = {r}"
    m1, m2 = Memory(), MemoryV2()
    m2.version = ctypes.sizeof(MemoryV2) | (2 << 24)
    assert nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m1)) == 0
    out = {"via": "ctypes", "total1": m1.total, "free1": m1.free, "used1": m1.used}
    r2 = nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m2))
    if r2 == 0:
        out.update(total2=m2.total, reserved2=m2.reserved, free2=m2.free, used2=m2.used)
    else:
        out["v2_error"] = f"nvmlDeviceGetMemoryInfo_v2 = {r2}"
    return out


def main() -> None:
    mem_get_info, uuid, framework = cuda_side()
    free0, total0 = mem_get_info()
    try:
        nv = nvml_pynvml(uuid)
    except ImportError:
        nv = nvml_ctypes(uuid)
    free1, total1 = mem_get_info()
    emit({"framework": framework, "uuid": uuid, "cuda_free_before": free0, "cuda_total_before": total0,
          "cuda_free_after": free1, "cuda_total_after": total1, "library_loaded": library_loaded(), **nv})


if __name__ == "__main__":
    main()
