"""Which function each driver lookup hands out, the way the CUDA runtime and libraries look them up.

For each (name, cudaVersion, flags) it calls cuGetProcAddress_v2 (found with dlsym on the libcuda
handle, as the CUDA runtime does) and, for each exported variant name, dlsym on that handle; every
pointer is identified with dladdr (library file and exact symbol). Run natively, it records what the
real driver returns; under libnvshare.so, what the program really gets. With --variants it also lists,
natively, every exported variant (base, _v2, _v3, _ptsz, _ptds, ...) whose address equals the pointer
cuGetProcAddress returned, so that a test can accept any alias of the same function.
"""

from __future__ import annotations

import argparse
import ctypes
import os

from progutil import emit, library_loaded

SUFFIXES = ["", "_v2", "_v3", "_v4", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds", "_v3_ptsz", "_v3_ptds"]
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_libc = ctypes.CDLL(None)
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
_libc.dladdr.restype = ctypes.c_int


def identify(ptr: int | None) -> dict | None:
    """{"file": basename, "symbol": exact exported name or None} of a function pointer."""
    if not ptr:
        return None
    info = DlInfo()
    if not _libc.dladdr(ctypes.c_void_p(ptr), ctypes.byref(info)):
        return {"file": None, "symbol": None}
    exact = info.dli_saddr == ptr and info.dli_sname is not None
    return {"file": os.path.basename(info.dli_fname.decode()) if info.dli_fname else None,
            "symbol": info.dli_sname.decode() if exact else None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--names", required=True, help="comma-separated base names")
    p.add_argument("--versions", default="12000,13000")
    p.add_argument("--variants", action="store_true",
                   help="also list the exported variants equal to each returned pointer")
    args = p.parse_args()
    names = args.names.split(",")
    versions = [int(v) for v in args.versions.split(",")]

    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0, "cuInit failed"
    gpa = cuda.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                    ctypes.POINTER(ctypes.c_int)]
    gpa.restype = ctypes.c_int

    exported: dict[str, int] = {}  # every variant name dlsym finds -> its address
    for base in names:
        for suffix in SUFFIXES:
            try:
                exported[base + suffix] = ctypes.cast(getattr(cuda, base + suffix), ctypes.c_void_p).value
            except AttributeError:
                pass

    lookups = []
    for base in names:
        for version in versions:
            for flags in (0, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM):
                ptr, status = ctypes.c_void_p(), ctypes.c_int(-1)
                rc = gpa(base.encode(), ctypes.byref(ptr), version, flags, ctypes.byref(status))
                entry = {"name": base, "version": version, "flags": flags, "rc": rc,
                         "status": status.value, "got": identify(ptr.value)}
                if args.variants:
                    entry["same_as"] = sorted(n for n, a in exported.items() if ptr.value and a == ptr.value)
                lookups.append(entry)

    emit({"gpa_function": identify(ctypes.cast(gpa, ctypes.c_void_p).value),
          "dlsym": {name: identify(addr) for name, addr in exported.items()},
          "lookups": lookups, "library_loaded": library_loaded()})


if __name__ == "__main__":
    main()
