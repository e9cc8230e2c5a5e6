"""What the probes share: the CUDA driver through ctypes (no library under test), its error check,
CUmemLocation and the primary context of device 0 made current."""
import ctypes as C

cu = C.CDLL("libcuda.so.1")


class Loc(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


HOST, DEV = Loc(2, 0), Loc(1, 0)  # CU_MEM_LOCATION_TYPE_HOST / _DEVICE (device 0)


def ck(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")


def context() -> C.c_void_p:
    """Device 0's primary context, current on this thread."""
    ck(cu.cuInit(0), "init")
    ctx = C.c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0), "ctx")
    ck(cu.cuCtxSetCurrent(ctx), "cur")
    return ctx
