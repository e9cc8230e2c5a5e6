"""Probe: copy-out + discard eviction and discard-populate + copy-in swap-in of a converted
(device-semantics) managed range, whole and pipelined in chunks over two streams, against pinned
copies of the same size in the same run; what a read of a discarded range returns; the cost of
pinning the staging memory from one thread and from several."""
import ctypes as C, os, threading, time

S = int(float(os.environ.get("PROBE_GIB", "8")) * 2**30)
from cudrv import DEV, HOST, Loc, ck, context, cu
pf = cu.cuMemPrefetchAsync_v2; pf.argtypes = [C.c_uint64, C.c_size_t, Loc, C.c_uint, C.c_void_p]
ctx = context()
def mkstream():
    s = C.c_void_p(); ck(cu.cuStreamCreate(C.byref(s), 1), "stream"); return s
A, B = mkstream(), mkstream()
def sync(*ss):
    for s in ss or (A, B): ck(cu.cuStreamSynchronize(s), "sync")
t = time.perf_counter(); H = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H), C.c_size_t(S), 0), "hostalloc")
print(f"pin {S/2**30:.0f} GiB in one cuMemHostAlloc: {(time.perf_counter()-t)*1e3:.0f} ms", flush=True)
parts = [C.c_void_p() for _ in range(8)]
def pin(i): ck(cu.cuMemHostAlloc(C.byref(parts[i]), C.c_size_t(S // 8), 0), "hostalloc part")
t = time.perf_counter(); ths = [threading.Thread(target=pin, args=(i,)) for i in range(8)]
[th.start() for th in ths]; [th.join() for th in ths]
print(f"pin {S/2**30:.0f} GiB as 8 parts from 8 threads: {(time.perf_counter()-t)*1e3:.0f} ms", flush=True)
t = time.perf_counter(); [cu.cuMemFreeHost(p) for p in parts]; print(f"free 8 parts: {(time.perf_counter()-t)*1e3:.0f} ms")
H2 = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(H2), C.c_size_t(S), 0), "hostalloc")
D = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(D), C.c_size_t(S)), "alloc")
for i in range(0, S, 1 << 20): C.memset(H.value + i, ((i >> 20) % 251) + 1, 1 << 20)
def once(fn):
    sync(); t = time.perf_counter(); fn(); sync(); return time.perf_counter() - t
d2h = min(once(lambda: ck(cu.cuMemcpyDtoHAsync_v2(H2, D, C.c_size_t(S), A), "c")) for _ in range(3))
h2d = min(once(lambda: ck(cu.cuMemcpyHtoDAsync_v2(D, H, C.c_size_t(S), A), "c")) for _ in range(3))
print(f"pinned D2H {d2h*1e3:.1f} ms ({S/d2h/1e9:.1f} GB/s), H2D {h2d*1e3:.1f} ms ({S/h2d/1e9:.1f} GB/s)", flush=True)
M = C.c_uint64(); ck(cu.cuMemAllocManaged(C.byref(M), C.c_size_t(S), 1), "managed")
def batch(fn, lo, n, stream, loc=None):
    ptrs = (C.c_uint64 * 1)(M.value + lo); sizes = (C.c_size_t * 1)(n)
    if loc is None:
        ck(fn(ptrs, sizes, C.c_size_t(1), C.c_ulonglong(0), stream), "discard")
    else:
        locs = (Loc * 1)(loc); idx = (C.c_size_t * 1)(0)
        ck(fn(ptrs, sizes, C.c_size_t(1), locs, idx, C.c_size_t(1), C.c_ulonglong(0), stream), "dap")
discard = lambda lo, n, s: batch(cu.cuMemDiscardBatchAsync, lo, n, s)
dap_dev = lambda lo, n, s: batch(cu.cuMemDiscardAndPrefetchBatchAsync, lo, n, s, DEV)
ck(pf(M, S, DEV, 0, A), "pf"); sync()
ck(cu.cuMemcpyHtoDAsync_v2(M, H, C.c_size_t(S), A), "fill"); sync()
def same(tag):
    C.memset(H2, 0, S); ck(cu.cuMemcpyDtoHAsync_v2(H2, M, C.c_size_t(S), A), "rd"); sync()
    ok = C.string_at(H, S) == C.string_at(H2, S)
    print(f"  data after {tag}: {'intact' if ok else 'DIFFERENT'}", flush=True)
    return ok
ev_ns = []
def evict_whole():
    ck(cu.cuMemcpyDtoHAsync_v2(H, M, C.c_size_t(S), A), "out"); discard(0, S, A)
evs = [C.c_void_p() for _ in range(256)]
for e in evs: ck(cu.cuEventCreate(C.byref(e), 2), "ev")  # disable timing
def evict_pipe(chunk):
    k = 0
    for lo in range(0, S, chunk):
        n = min(chunk, S - lo)
        ck(cu.cuMemcpyDtoHAsync_v2(H.value + lo, M.value + lo, C.c_size_t(n), A), "out")
        ck(cu.cuEventRecord(evs[k], A), "rec"); ck(cu.cuStreamWaitEvent(B, evs[k], 0), "wait")
        discard(lo, n, B); k += 1
def swapin_whole_dap():
    dap_dev(0, S, A); ck(cu.cuMemcpyHtoDAsync_v2(M, H, C.c_size_t(S), A), "in")
def swapin_copy_only():
    ck(cu.cuMemcpyHtoDAsync_v2(M, H, C.c_size_t(S), A), "in")
def swapin_pipe(chunk):
    k = 0
    for lo in range(0, S, chunk):
        n = min(chunk, S - lo)
        dap_dev(lo, n, B); ck(cu.cuEventRecord(evs[k], B), "rec"); ck(cu.cuStreamWaitEvent(A, evs[k], 0), "wait")
        ck(cu.cuMemcpyHtoDAsync_v2(M.value + lo, H.value + lo, C.c_size_t(n), A), "in"); k += 1
def swapin_prefetch_pipe(chunk):
    k = 0
    for lo in range(0, S, chunk):
        n = min(chunk, S - lo)
        ck(pf(M.value + lo, n, DEV, 0, B), "pf"); ck(cu.cuEventRecord(evs[k], B), "rec"); ck(cu.cuStreamWaitEvent(A, evs[k], 0), "wait")
        ck(cu.cuMemcpyHtoDAsync_v2(M.value + lo, H.value + lo, C.c_size_t(n), A), "in"); k += 1
# what a read of a discarded range returns (pages kept: the old contents)
evict_whole(); sync()
probe = C.c_void_p(); ck(cu.cuMemHostAlloc(C.byref(probe), C.c_size_t(64 << 20), 0), "probe")
ck(cu.cuMemcpyDtoHAsync_v2(probe, M, C.c_size_t(64 << 20), A), "rd"); sync()
kept = C.string_at(probe, 1 << 20) == C.string_at(H, 1 << 20)
print(f"read of a discarded range returns the old contents: {kept} (first byte {C.string_at(probe, 1)[0]}, pattern {C.string_at(H,1)[0]})", flush=True)
swapin_whole_dap(); sync(); same("restore")
for name, ev, si in [("whole", evict_whole, swapin_whole_dap), ("whole/copy only", evict_whole, swapin_copy_only),
                     ("pipe 256M", lambda: evict_pipe(256 << 20), lambda: swapin_pipe(256 << 20)),
                     ("pipe 64M", lambda: evict_pipe(64 << 20), lambda: swapin_pipe(64 << 20)),
                     ("pipe 512M/prefetch", lambda: evict_pipe(512 << 20), lambda: swapin_prefetch_pipe(512 << 20)),
                     ("pipe 256M", lambda: evict_pipe(256 << 20), lambda: swapin_pipe(256 << 20)),
                     ("pipe 128M", lambda: evict_pipe(128 << 20), lambda: swapin_pipe(128 << 20))]:
    for r in range(2):
        te = once(ev); ti = once(si)
        print(f"{name:20s} evict {te*1e3:7.1f} ms ratio {d2h/te:4.2f} | swap-in {ti*1e3:7.1f} ms ratio {h2d/ti:4.2f}", flush=True)
    same(name)
# no copy out when the host copy is valid: discard only, then swap in
for r in range(2):
    te = once(lambda: discard(0, S, A)); ti = once(lambda: swapin_pipe(256 << 20))
    print(f"{'discard only (valid)':20s} evict {te*1e3:7.1f} ms ratio {d2h/te:4.2f} | swap-in {ti*1e3:7.1f} ms ratio {h2d/ti:4.2f}", flush=True)
same("discard-only rounds")
print("done")
