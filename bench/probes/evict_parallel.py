"""Probe: eviction of resident managed memory to the host split over T threads (each with its own
stream and a contiguous, 2 MiB aligned share of the range), against a pinned D2H copy of the same
size in the same run. Also the bulk prefetch back, and the data checked after the round trip."""
import ctypes as C, os, threading, time

S = int(float(os.environ.get("PROBE_GIB", "8")) * 2**30)
from cudrv import DEV, HOST, Loc, ck, context, cu
pf = cu.cuMemPrefetchAsync_v2; pf.argtypes = [C.c_uint64, C.c_size_t, Loc, C.c_uint, C.c_void_p]
ctx = context()
streams = []
for _ in range(32):
    s = C.c_void_p(); ck(cu.cuStreamCreate(C.byref(s), 1), "stream"); streams.append(s)
st = streams[0]
def avail():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable"): return int(line.split()[1]) / 2**20
H = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H), C.c_size_t(S), 0), "hostalloc")
H2 = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H2), C.c_size_t(S), 0), "hostalloc")
D = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(D), C.c_size_t(S)), "alloc")
for i in range(0, S, 1 << 20): C.memset(H.value + i, (i >> 20) & 0xFF, 1 << 20)
def copy(fn, a, b):
    ck(cu.cuStreamSynchronize(st), "s"); t = time.perf_counter(); ck(fn(a, b, C.c_size_t(S), st), "copy"); ck(cu.cuStreamSynchronize(st), "s"); return time.perf_counter() - t
d2h = min(copy(cu.cuMemcpyDtoHAsync_v2, H2, D) for _ in range(3))
h2d = min(copy(cu.cuMemcpyHtoDAsync_v2, D, H) for _ in range(3))
print(f"{S/2**30:.0f} GiB: pinned D2H {d2h*1e3:.1f} ms ({S/d2h/1e9:.1f} GB/s), H2D {h2d*1e3:.1f} ms ({S/h2d/1e9:.1f} GB/s)", flush=True)
M = C.c_uint64(); ck(cu.cuMemAllocManaged(C.byref(M), C.c_size_t(S), 1), "managed")
ck(pf(M, S, DEV, 0, st), "pf"); ck(cu.cuStreamSynchronize(st), "s")
ck(cu.cuMemcpyHtoDAsync_v2(M, H, C.c_size_t(S), st), "fill"); ck(cu.cuStreamSynchronize(st), "s")
ALIGN = 2 << 20
def parallel(loc, T, chunk_mib=0):
    share = -(-S // T); share = -(-share // ALIGN) * ALIGN
    def work(i):
        ck(cu.cuCtxSetCurrent(ctx), "cur")
        lo, hi = i * share, min(S, (i + 1) * share)
        step = (chunk_mib << 20) or (hi - lo)
        p = lo
        while p < hi:
            n = min(step, hi - p); ck(pf(M.value + p, n, loc, 0, streams[i]), "pf"); p += n
        ck(cu.cuStreamSynchronize(streams[i]), "sync")
    ths = [threading.Thread(target=work, args=(i,)) for i in range(T) if i * share < S]
    t = time.perf_counter()
    for th in ths: th.start()
    for th in ths: th.join()
    return time.perf_counter() - t
def check(tag):
    C.memset(H2, 0, S); ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), st), "rd"); ck(cu.cuStreamSynchronize(st), "s")
    print(f"  data after {tag}: {'intact' if C.string_at(H, S) == C.string_at(H2, S) else 'DIFFERENT'}", flush=True)
for T, chunk in [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 64), (16, 64), (16, 0), (8, 0), (32, 0), (1, 0)]:
    a0 = avail()
    out = parallel(HOST, T, chunk)
    a1 = avail()
    back = parallel(DEV, T, chunk)
    print(f"T={T:2d} chunk={chunk or 'share':>5}: to host {out*1e3:7.1f} ms {S/out/1e9:5.1f} GB/s ratio {d2h/out:4.2f} (host avail -{a0-a1:4.1f} GiB) | "
          f"to device {back*1e3:6.1f} ms {S/back/1e9:5.1f} GB/s ratio {h2d/back:4.2f}", flush=True)
check("the rounds")
# Prefetch to the device with T threads from a host-resident state vs one thread, once more
print("done")
