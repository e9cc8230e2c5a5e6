"""Probe: ways to move resident managed memory out of the GPU and back, against pinned copies of
the same size in the same run (driver API through ctypes; no library under test).

Prints one line per measurement: name, seconds, GB/s, ratio to the pinned copy of that direction,
and what cuMemGetInfo reports free on the device after it (GiB)."""
import ctypes as C, os, sys, time

S = int(float(os.environ.get("PROBE_GIB", "4")) * 2**30)
from cudrv import DEV, HOST, Loc, ck, context, cu
ctx = context()
st = C.c_void_p(); ck(cu.cuStreamCreate(C.byref(st), 1), "stream")
def free_gib():
    f, t = C.c_size_t(), C.c_size_t(); cu.cuMemGetInfo_v2(C.byref(f), C.byref(t)); return f.value / 2**30
def avail_gib():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable"):
            return int(line.split()[1]) / 2**20
def sync(): ck(cu.cuStreamSynchronize(st), "sync")
rows = []
def timed(name, fn, ref=None):
    sync(); t = time.perf_counter(); fn(); sync(); dt = time.perf_counter() - t
    gbs = S / dt / 1e9
    rows.append((name, dt, gbs, gbs / ref if ref else 0.0))
    print(f"{name:58s} {dt*1e3:9.2f} ms {gbs:7.1f} GB/s ratio {gbs/ref if ref else 0:5.2f}  free {free_gib():6.2f} GiB  avail {avail_gib():7.1f} GiB", flush=True)
    return gbs
print(f"size {S/2**30:.1f} GiB; free at start {free_gib():.2f} GiB; host avail {avail_gib():.1f} GiB")
t = time.perf_counter(); H = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H), C.c_size_t(S), 0), "hostalloc")
print(f"cuMemHostAlloc {S/2**30:.0f} GiB: {(time.perf_counter()-t)*1e3:.1f} ms")
H2 = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H2), C.c_size_t(S), 0), "hostalloc2")
D = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(D), C.c_size_t(S)), "alloc")
C.memset(H, 0x5A, S)
for i in range(0, S, 1 << 20):  # a pattern that differs per MiB
    C.memset(H.value + i, (i >> 20) & 0xFF, 64)
d2h = h2d = 0
for _ in range(3):
    h2d = max(h2d, timed("pinned H2D copy (reference)", lambda: ck(cu.cuMemcpyHtoDAsync_v2(D, H, C.c_size_t(S), st), "h2d")))
    d2h = max(d2h, timed("pinned D2H copy (reference)", lambda: ck(cu.cuMemcpyDtoHAsync_v2(H2, D, C.c_size_t(S), st), "d2h")))
M = C.c_uint64(); ck(cu.cuMemAllocManaged(C.byref(M), C.c_size_t(S), 1), "managed")
pf = cu.cuMemPrefetchAsync_v2
pf.argtypes = [C.c_uint64, C.c_size_t, Loc, C.c_uint, C.c_void_p]
def prefetch(loc): ck(pf(M, S, loc, 0, st), "prefetch")
ptrs = (C.c_uint64 * 1)(M.value); sizes = (C.c_size_t * 1)(S); idx = (C.c_size_t * 1)(0)
def dap(loc):
    locs = (Loc * 1)(loc)
    ck(cu.cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, C.c_size_t(1), locs, idx, C.c_size_t(1), C.c_ulonglong(0), st), "discard+prefetch")
def discard(): ck(cu.cuMemDiscardBatchAsync(ptrs, sizes, C.c_size_t(1), C.c_ulonglong(0), st), "discard")
def fill_resident():
    prefetch(DEV); sync(); ck(cu.cuMemcpyHtoDAsync_v2(M, H, C.c_size_t(S), st), "fill"); sync()
def check(tag):
    C.memset(H2, 0, S); ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), st), "rd"); sync()
    ok = C.string_at(H, S) == C.string_at(H2, S)
    print(f"  data after {tag}: {'intact' if ok else 'DIFFERENT'}", flush=True)
fill_resident(); print(f"managed resident: free {free_gib():.2f} GiB")
for r in range(2):
    timed(f"[A{r}] prefetch to host", lambda: prefetch(HOST), d2h)
    timed(f"[A{r}] prefetch to device", lambda: prefetch(DEV), h2d)
check("A")
for r in range(3):
    timed(f"[B{r}] copy managed->pinned", lambda: ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), st), "out"), d2h)
    timed(f"[B{r}] discard+prefetch to host", lambda: dap(HOST), d2h)
    timed(f"[B{r}] discard+prefetch to device", lambda: dap(DEV), h2d)
    timed(f"[B{r}] copy pinned->managed", lambda: ck(cu.cuMemcpyHtoDAsync_v2(M, H2, C.c_size_t(S), st), "in"), h2d)
check("B")
for r in range(2):
    timed(f"[C{r}] copy managed->pinned", lambda: ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), st), "out"), d2h)
    timed(f"[C{r}] discard only", discard, d2h)
    time.sleep(0.2); print(f"  free 0.2 s after discard: {free_gib():.2f} GiB")
    timed(f"[C{r}] prefetch discarded to host", lambda: prefetch(HOST), d2h)
    timed(f"[C{r}] discard+prefetch to device", lambda: dap(DEV), h2d)
    timed(f"[C{r}] copy pinned->managed", lambda: ck(cu.cuMemcpyHtoDAsync_v2(M, H2, C.c_size_t(S), st), "in"), h2d)
check("C")
# D: the host copy is still valid (weights not written): no copy out, only the discard to host
for r in range(2):
    timed(f"[D{r}] discard+prefetch to host (no copy)", lambda: dap(HOST), d2h)
    timed(f"[D{r}] discard+prefetch to device + copy in", lambda: (dap(DEV), ck(cu.cuMemcpyHtoDAsync_v2(M, H2, C.c_size_t(S), st), "in")), h2d)
check("D")
# E: prefetch to host when host pages exist already (after A populated them? measure again)
timed("[E] copy out + discard+prefetch host in one go", lambda: (ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), st), "out"), dap(HOST)), d2h)
timed("[E] discard+prefetch device + copy in in one go", lambda: (dap(DEV), ck(cu.cuMemcpyHtoDAsync_v2(M, H2, C.c_size_t(S), st), "in")), h2d)
check("E")
t = time.perf_counter(); ck(cu.cuMemFreeHost(H2), "freehost"); print(f"cuMemFreeHost: {(time.perf_counter()-t)*1e3:.1f} ms")
libc = C.CDLL(None); libc.mmap.restype = C.c_void_p
libc.mmap.argtypes = [C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_int, C.c_long]
p = libc.mmap(None, S, 3, 0x22, -1, 0)
t = time.perf_counter(); r = cu.cuMemHostRegister_v2(C.c_void_p(p), C.c_size_t(S), 0); print(f"cuMemHostRegister {S/2**30:.0f} GiB (untouched mmap): {(time.perf_counter()-t)*1e3:.1f} ms rc {r}")
print("done")
