"""Probe: which swap-in is fast and correct after an eviction that copied a resident managed range
out to pinned memory (at copy speed) and discarded it. Each variant runs 3 full cycles from a
resident state, 4 GiB, against pinned copies of the same size in the same run."""
import ctypes as C, os, threading, time

S = int(float(os.environ.get("PROBE_GIB", "4")) * 2**30)
CH = 256 << 20
from cudrv import DEV, HOST, Loc, ck, context, cu
u64, sz, vp = C.c_uint64, C.c_size_t, C.c_void_p
cu.cuMemPrefetchAsync_v2.argtypes = [u64, sz, Loc, C.c_uint, vp]
cu.cuMemcpyDtoHAsync_v2.argtypes = [vp, u64, sz, vp]
cu.cuMemcpyHtoDAsync_v2.argtypes = [u64, vp, sz, vp]
cu.cuMemDiscardBatchAsync.argtypes = [C.POINTER(u64), C.POINTER(sz), sz, C.c_ulonglong, vp]
cu.cuMemDiscardAndPrefetchBatchAsync.argtypes = [C.POINTER(u64), C.POINTER(sz), sz, C.POINTER(Loc), C.POINTER(sz), sz, C.c_ulonglong, vp]
ctx = context()
def mkstream():
    s = vp(); ck(cu.cuStreamCreate(C.byref(s), 1), "stream"); return s
A, B = mkstream(), mkstream()
def sync():
    ck(cu.cuStreamSynchronize(A), "sync"); ck(cu.cuStreamSynchronize(B), "sync")
parts = [vp() for _ in range(8)]
def pin(i):
    ck(cu.cuCtxSetCurrent(ctx), "cur"); ck(cu.cuMemHostAlloc(C.byref(parts[i]), sz(S // 8), 0), "hostalloc part")
t = time.perf_counter(); ths = [threading.Thread(target=pin, args=(i,)) for i in range(8)]
[th.start() for th in ths]; [th.join() for th in ths]
print(f"pin {S/2**30:.0f} GiB as 8 parts from 8 threads: {(time.perf_counter()-t)*1e3:.0f} ms ({sum(1 for p in parts if p.value)} ok)", flush=True)
t = time.perf_counter(); H = vp(); ck(cu.cuMemHostAlloc(C.byref(H), sz(S), 0), "hostalloc")
print(f"pin {S/2**30:.0f} GiB in one call: {(time.perf_counter()-t)*1e3:.0f} ms", flush=True)
H2 = vp(); ck(cu.cuMemHostAlloc(C.byref(H2), sz(S), 0), "hostalloc")
D = u64(); ck(cu.cuMemAlloc_v2(C.byref(D), sz(S)), "alloc")
for i in range(0, S, 1 << 20): C.memset(H.value + i, ((i >> 20) % 251) + 1, 1 << 20)
REF = C.string_at(H, S)
def once(fn):
    sync(); t = time.perf_counter(); fn(); sync(); return time.perf_counter() - t
d2h = min(once(lambda: ck(cu.cuMemcpyDtoHAsync_v2(H2, D.value, S, A), "c")) for _ in range(3))
h2d = min(once(lambda: ck(cu.cuMemcpyHtoDAsync_v2(D.value, H, S, A), "c")) for _ in range(3))
print(f"pinned D2H {d2h*1e3:.1f} ms ({S/d2h/1e9:.1f} GB/s), H2D {h2d*1e3:.1f} ms ({S/h2d/1e9:.1f} GB/s)", flush=True)
M = u64(); ck(cu.cuMemAllocManaged(C.byref(M), sz(S), 1), "managed")
def rng(lo, n): return (u64 * 1)(M.value + lo), (sz * 1)(n)
def discard(lo, n, s):
    p, q = rng(lo, n); ck(cu.cuMemDiscardBatchAsync(p, q, 1, 0, s), "discard")
def dap(lo, n, s, loc):
    p, q = rng(lo, n); l = (Loc * 1)(loc); i = (sz * 1)(0)
    ck(cu.cuMemDiscardAndPrefetchBatchAsync(p, q, 1, l, i, 1, 0, s), "dap")
def pf(lo, n, s, loc): ck(cu.cuMemPrefetchAsync_v2(M.value + lo, n, loc, 0, s), "pf")
def out(lo, n, s): ck(cu.cuMemcpyDtoHAsync_v2(H.value + lo, M.value + lo, n, s), "out")
def inn(lo, n, s): ck(cu.cuMemcpyHtoDAsync_v2(M.value + lo, H.value + lo, n, s), "in")
evs = [vp() for _ in range(64)]
for e in evs: ck(cu.cuEventCreate(C.byref(e), 2), "ev")
def chunks():
    for k, lo in enumerate(range(0, S, CH)): yield k, lo, min(CH, S - lo)
def then(first, second):
    """first(lo,n,B) then second(lo,n,A) chunk by chunk, second waits for first's chunk"""
    def run():
        for k, lo, n in chunks():
            first(lo, n, B); ck(cu.cuEventRecord(evs[k], B), "rec"); ck(cu.cuStreamWaitEvent(A, evs[k], 0), "w"); second(lo, n, A)
    return run
def resident():
    pf(0, S, A, DEV); sync(); inn(0, S, A); sync()
def check():
    C.memset(H2, 0, S); ck(cu.cuMemcpyDtoHAsync_v2(H2, M.value, S, A), "rd"); sync(); return C.string_at(H2, S) == REF
V = {
 "old: prefetch host | prefetch dev": (lambda: pf(0, S, A, HOST), lambda: pf(0, S, A, DEV)),
 "out+discard | copy in": (then(out, discard), lambda: inn(0, S, A)),
 "out+discard | prefetch dev, copy in": (then(out, discard), then(lambda lo, n, s: pf(lo, n, s, DEV), inn)),
 "out+discard | dap dev, copy in": (then(out, discard), then(lambda lo, n, s: dap(lo, n, s, DEV), inn)),
 "out+dap host | dap dev, copy in": (then(out, lambda lo, n, s: dap(lo, n, s, HOST)), then(lambda lo, n, s: dap(lo, n, s, DEV), inn)),
 "out+discard+pf host | dap dev, copy in": (then(out, lambda lo, n, s: (discard(lo, n, s), pf(lo, n, s, HOST))), then(lambda lo, n, s: dap(lo, n, s, DEV), inn)),
}
for name, (ev, si) in V.items():
    for r in range(3):
        resident()
        try:
            te = once(ev); ti = once(si); ok = check()
        except RuntimeError as e:
            print(f"{name:42s} ERROR {e}", flush=True); sync(); continue
        print(f"{name:42s} evict {te*1e3:7.1f} ms ratio {d2h/te:4.2f} | swap-in {ti*1e3:8.1f} ms ratio {h2d/ti:4.2f} | {'intact' if ok else 'DIFFERENT'}", flush=True)
print("done")
