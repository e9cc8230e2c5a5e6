"""Probe: how fast can pinned host memory for a swap-out be had, and how close to the bus does the
first swap-out of a range of device memory come when pinning and copying overlap?

For S GiB (--gib, default 8, at most 16), each from fresh memory (the kernel zeroes every page), in
pieces of --piece-mib (default 256, the library's NVSHARE_SWAP_PIN_PIECE):
  hostalloc-one        cuMemHostAlloc of S in one call
  hostalloc-T          cuMemHostAlloc of each piece, on T threads (1, 4, 8)
  register-T           one anonymous mapping of S (2 MiB aligned, MADV_HUGEPAGE, MADV_DONTFORK); each
                       piece populated (MADV_POPULATE_WRITE, else a write per 4 KiB page) then
                       cuMemHostRegister'ed, on T threads: what the library does (swappin.c)
  register-lazy-T      the same without populating first (the driver's pinning faults the pages in)
  populate-T           the mapping populated only, nothing registered: the kernel's share of
                       register-T (faulting in and zeroing huge pages)
  pipeline-M-T         the library's cold swap-out (swapcold.c): T threads pin the pieces (method M:
                       register or hostalloc) while this thread copies each pinned piece from a
                       device buffer of S (cuMemAlloc) on a stream as soon as it is pinned, in order;
                       timed from the first pin to the end of the last copy
Each against the reference made in the same run: a pinned device-to-host copy of S (best of 3) into
memory pinned before the measurements; ratio = reference / measured (1 = the bus). The release of
each variant's memory is timed too (free_ms). Needs S of device memory (plain cuMemAlloc) and about
2 S of host memory.

    python3 bench/probes/pin_speed.py [--gib 8] [--piece-mib 256] [--repeat 2] [--json F]
"""
from __future__ import annotations

import argparse
import ctypes as C
import json
import os
import statistics
import sys
import threading
import time

MAX_GIB = 16
THREADS = (1, 4, 8)
MADV_DONTNEED, MADV_HUGEPAGE, MADV_DONTFORK, MADV_POPULATE_WRITE = 4, 14, 10, 23
STEP = 2 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=8.0, help=f"bytes to pin per variant, GiB (<= {MAX_GIB})")
    ap.add_argument("--piece-mib", type=int, default=256, help="piece size, MiB (a multiple of 2)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each variant (median reported)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    if not 0 < a.gib <= MAX_GIB:
        ap.error(f"--gib must be in (0, {MAX_GIB}]")
    if a.piece_mib < 2 or a.piece_mib % 2:
        ap.error("--piece-mib must be a positive multiple of 2")
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    return a


def variant_names() -> list[tuple[str, int]]:
    out = [("hostalloc-one", 1)]
    out += [(f"hostalloc-{t}", t) for t in THREADS]
    out += [(f"register-{t}", t) for t in THREADS]
    out += [("register-lazy-8", 8), ("populate-8", 8)]
    out += [(f"pipeline-{m}-{t}", t) for m in ("register", "hostalloc") for t in (4, 8)]
    return out


def table(result: dict) -> str:
    """The result as a short text table: one line per variant."""
    ref = result["reference_d2h_ms"]
    gib = result["gib"]
    lines = [f"pinned D2H of {gib:g} GiB (reference): {ref:.1f} ms ({gib * 2**30 / ref / 1e6:.1f} GB/s); "
             f"pieces of {result['piece_mib']} MiB; THP {result.get('thp', '?')}",
             f"{'variant':<22} {'threads':>7} {'ms (median)':>12} {'GB/s':>7} {'reference/measured':>19} {'free ms':>8}"]
    for v in result["variants"]:
        if v.get("error"):
            lines.append(f"{v['name']:<22} {v['threads']:>7} {'error: ' + v['error']}")
            continue
        ms = v["ms"]
        lines.append(f"{v['name']:<22} {v['threads']:>7} {ms:>12.1f} {gib * 2**30 / ms / 1e6:>7.2f} "
                     f"{ref / ms:>19.3f} {v['free_ms']:>8.1f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- on the GPU
class Host:
    """Host memory pinned in pieces by one method; released by free()."""

    def __init__(self, ck, size: int, piece: int, method: str, libc, cu, populate: bool = True):
        self.ck, self.size, self.piece, self.method = ck, size, piece, method
        self.libc, self.cu, self.populate = libc, cu, populate
        self.n = (size + piece - 1) // piece
        self.at = [None] * self.n
        self.base = None
        if method in ("register", "populate"):
            over = size + STEP
            m = libc.mmap(None, C.c_size_t(over), 3, 0x22, -1, C.c_long(0))  # RW, PRIVATE|ANONYMOUS
            if m in (None, C.c_void_p(-1).value):
                raise RuntimeError("mmap failed")
            base = (m + STEP - 1) // STEP * STEP
            if base > m:
                libc.munmap(C.c_void_p(m), C.c_size_t(base - m))
            tail = m + over - (base + size)
            if tail:
                libc.munmap(C.c_void_p(base + size), C.c_size_t(tail))
            libc.madvise(C.c_void_p(base), C.c_size_t(size), MADV_HUGEPAGE)
            libc.madvise(C.c_void_p(base), C.c_size_t(size), MADV_DONTFORK)
            self.base = base

    def length(self, i: int) -> int:
        return min(self.piece, self.size - i * self.piece)

    def pin(self, i: int) -> None:
        n = self.length(i)
        if self.method == "hostalloc":
            h = C.c_void_p()
            self.ck(self.cu.cuMemHostAlloc(C.byref(h), C.c_size_t(n), 1), "cuMemHostAlloc")
            self.at[i] = h.value
            return
        at = self.base + i * self.piece
        if self.populate and self.libc.madvise(C.c_void_p(at), C.c_size_t(n), MADV_POPULATE_WRITE) != 0:
            C.memset(at, 0, n)  # kernels before 5.14: written instead
        if self.method == "register":
            self.ck(self.cu.cuMemHostRegister_v2(C.c_void_p(at), C.c_size_t(n), 1), "cuMemHostRegister")
            self.at[i] = at

    def free(self) -> None:
        for a in self.at:
            if a is None:
                continue
            if self.method == "hostalloc":
                self.cu.cuMemFreeHost(C.c_void_p(a))
            else:
                self.cu.cuMemHostUnregister(C.c_void_p(a))
        if self.base is not None:
            self.libc.munmap(C.c_void_p(self.base), C.c_size_t(self.size))


def pin_on_threads(host: Host, threads: int, ctx, cu, done=None) -> None:
    """Pin every piece, in order, on `threads` threads; done[i] is set as piece i is pinned."""
    nxt, mu, errors = [0], threading.Lock(), []

    def work():
        cu.cuCtxSetCurrent(ctx)
        while True:
            with mu:
                i = nxt[0]
                nxt[0] += 1
            if i >= host.n or errors:
                return
            try:
                host.pin(i)
            except Exception as e:  # noqa: BLE001 - reported by the caller
                errors.append(str(e))
                for d in done or ():  # the copier waits for no piece that will not come
                    d.set()
            if done is not None:
                done[i].set()

    ths = [threading.Thread(target=work) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errors:
        raise RuntimeError(errors[0])


def run_gpu(a: argparse.Namespace) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cudrv import ck, context, cu  # loads libcuda: only here

    libc = C.CDLL(None, use_errno=True)
    libc.mmap.restype = C.c_void_p
    libc.mmap.argtypes = [C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_int, C.c_long]
    libc.munmap.argtypes = [C.c_void_p, C.c_size_t]
    libc.madvise.argtypes = [C.c_void_p, C.c_size_t, C.c_int]
    ctx = context()
    size, piece = int(a.gib * 2**30) // STEP * STEP, a.piece_mib << 20
    stream = C.c_void_p()
    ck(cu.cuStreamCreate(C.byref(stream), 1), "stream")
    dev = C.c_uint64()
    ck(cu.cuMemAlloc_v2(C.byref(dev), C.c_size_t(size)), "cuMemAlloc")
    ck(cu.cuMemsetD8_v2(dev, C.c_ubyte(0x5A), C.c_size_t(size)), "memset")
    ref_buf = C.c_void_p()
    ck(cu.cuMemHostAlloc(C.byref(ref_buf), C.c_size_t(size), 1), "reference buffer")

    def d2h_ms() -> float:
        t = time.perf_counter()
        ck(cu.cuMemcpyDtoHAsync_v2(ref_buf, dev, C.c_size_t(size), stream), "copy")
        ck(cu.cuStreamSynchronize(stream), "sync")
        return (time.perf_counter() - t) * 1e3

    ref = min(d2h_ms() for _ in range(3))

    def once(name: str, threads: int) -> tuple[float, float]:
        method = next(m for m in ("hostalloc", "populate", "register") if m in name)
        if name == "hostalloc-one":
            h, t = C.c_void_p(), time.perf_counter()
            ck(cu.cuMemHostAlloc(C.byref(h), C.c_size_t(size), 1), "cuMemHostAlloc")
            ms = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            cu.cuMemFreeHost(h)
            return ms, (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        host = Host(ck, size, piece, method, libc, cu, populate="lazy" not in name)
        pinner = None
        try:
            if name.startswith("pipeline"):
                done = [threading.Event() for _ in range(host.n)]
                pinner = threading.Thread(target=pin_on_threads, args=(host, threads, ctx, cu, done))
                pinner.start()
                for i in range(host.n):
                    done[i].wait()
                    if host.at[i] is None:
                        raise RuntimeError(f"piece {i} not pinned")
                    ck(cu.cuMemcpyDtoHAsync_v2(C.c_void_p(host.at[i]), C.c_uint64(dev.value + i * piece),
                                               C.c_size_t(host.length(i)), stream), "copy")
                pinner.join()
                ck(cu.cuStreamSynchronize(stream), "sync")
            else:
                pin_on_threads(host, threads, ctx, cu)
            ms = (time.perf_counter() - t) * 1e3
        finally:
            if pinner is not None:
                pinner.join()
            t = time.perf_counter()
            host.free()
        return ms, (time.perf_counter() - t) * 1e3

    variants = []
    for name, threads in variant_names():
        runs, frees, error = [], [], None
        for _ in range(a.repeat):
            try:
                ms, fr = once(name, threads)
            except Exception as e:  # noqa: BLE001 - a variant the host refuses is reported, not fatal
                error = str(e)
                break
            runs.append(ms)
            frees.append(fr)
        v = {"name": name, "threads": threads, "runs_ms": runs, "free_runs_ms": frees}
        if error:
            v["error"] = error
        else:
            v.update(ms=statistics.median(runs), free_ms=statistics.median(frees),
                     ratio=ref / statistics.median(runs))
        variants.append(v)
        print(f"{name}: {v.get('ms', float('nan')):.1f} ms {error or ''}", file=sys.stderr, flush=True)
    drv = C.c_int()
    cu.cuDriverGetVersion(C.byref(drv))
    cu.cuMemFreeHost(ref_buf)
    cu.cuMemFree_v2(dev)
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        thp = "unknown"
    return {"gib": size / 2**30, "piece_mib": a.piece_mib, "repeat": a.repeat, "reference_d2h_ms": ref,
            "driver_version": drv.value, "kernel": os.uname().release, "thp": thp, "variants": variants}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    result = run_gpu(a)
    print(table(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
