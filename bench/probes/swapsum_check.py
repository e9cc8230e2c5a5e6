"""Probe: the swap store's checksum kernel (native/src/swap/swapsum.c) on the GPU: its PTX loads, a sum is
the same every time, equals a host implementation of the same formula, changes when one byte changes,
and how long it takes per GiB against a device-to-device copy of the same size in the same run."""
import ctypes as C, pathlib, re, time
import numpy as np

src = (pathlib.Path(__file__).resolve().parents[2] / "native/src/swap/swapsum.c").read_text()
seg = src[src.index("swapsum_ptx[] ="):]
seg = seg[:seg.index('";\n') + 2]
seg = re.sub(r"/\*.*?\*/", "", seg, flags=re.S)
ptx = "".join(bytes(m, "utf-8").decode("unicode_escape") for m in re.findall(r'"((?:[^"\\]|\\.)*)"', seg))
from cudrv import ck, context, cu
u64, vp = C.c_uint64, C.c_void_p
ctx = context()
mod, fn = vp(), vp()
ck(cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx.encode())), "load PTX")
ck(cu.cuModuleGetFunction(C.byref(fn), mod, b"nvs_swap_sum"), "function")
cu.cuMemcpyHtoD_v2.argtypes = [u64, vp, C.c_size_t]; cu.cuMemcpyDtoH_v2.argtypes = [vp, u64, C.c_size_t]
cu.cuMemsetD8_v2.argtypes = [u64, C.c_ubyte, C.c_size_t]; cu.cuMemcpyDtoD_v2.argtypes = [u64, u64, C.c_size_t]
out = u64(); ck(cu.cuMemAlloc_v2(C.byref(out), 16), "out")
def gpu_sum(ptr, size):
    ck(cu.cuMemsetD8_v2(out.value, 0, 16), "zero")
    d, w, o = u64(ptr), u64(size // 8), u64(out.value)
    params = (vp * 3)(C.cast(C.byref(d), vp), C.cast(C.byref(w), vp), C.cast(C.byref(o), vp))
    blocks = min(2048, max(1, (size // 8 + 255) // 256))
    ck(cu.cuLaunchKernel(fn, blocks, 1, 1, 256, 1, 1, 0, None, params, None), "launch")
    res = (C.c_uint64 * 2)(); ck(cu.cuMemcpyDtoH_v2(C.cast(res, vp), out.value, 16), "read"); return tuple(res)
M = np.uint64
def mix(x):
    x = x ^ (x >> M(30)); x = x * M(0xBF58476D1CE4E5B9); x = x ^ (x >> M(27)); x = x * M(0x94D049BB133111EB); return x ^ (x >> M(31))
def host_sum(words):
    i = np.arange(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        s1 = mix(words + i * M(0x9E3779B97F4A7C15)).sum(dtype=np.uint64)
        s2 = mix((words ^ M(0xD6E8FEB86659FD93)) * M(0xC2B2AE3D27D4EB4F) + i).sum(dtype=np.uint64)
    return int(s1), int(s2)
small = np.random.default_rng(1).integers(0, 2**63, size=(64 << 20) // 8, dtype=np.uint64)
d = u64(); ck(cu.cuMemAlloc_v2(C.byref(d), small.nbytes), "alloc"); ck(cu.cuMemcpyHtoD_v2(d.value, small.ctypes.data, small.nbytes), "h2d")
g1, g2 = gpu_sum(d.value, small.nbytes), gpu_sum(d.value, small.nbytes)
h = host_sum(small)
print(f"64 MiB: GPU sum {g1[0]:#x},{g1[1]:#x} twice equal: {g1 == g2}; equals the host formula: {g1 == h}")
ck(cu.cuMemsetD8_v2(d.value + 12345, 0x77, 1), "poke")
print(f"one byte changed: sum changed: {gpu_sum(d.value, small.nbytes) != g1}")
S = 4 << 30
big = u64(); ck(cu.cuMemAllocManaged(C.byref(big), C.c_size_t(S), 1), "managed")
ck(cu.cuMemsetD8_v2(big.value, 3, C.c_size_t(S)), "fill"); ck(cu.cuCtxSynchronize(), "sync")
dst = u64(); ck(cu.cuMemAlloc_v2(C.byref(dst), C.c_size_t(S)), "dst")
gpu_sum(big.value, S); ck(cu.cuCtxSynchronize(), "sync")
t = time.perf_counter(); [gpu_sum(big.value, S) for _ in range(5)]; ck(cu.cuCtxSynchronize(), "sync"); ts = (time.perf_counter() - t) / 5
t = time.perf_counter(); [cu.cuMemcpyDtoD_v2(dst.value, big.value, S) for _ in range(5)]; ck(cu.cuCtxSynchronize(), "sync"); tc = (time.perf_counter() - t) / 5
print(f"4 GiB resident managed: checksum {ts*1e3:.2f} ms ({S/ts/1e9:.0f} GB/s read); device-to-device copy {tc*1e3:.2f} ms; "
      f"checksum / copy {ts/tc:.2f}")
