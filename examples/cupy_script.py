#!/usr/bin/env python3
"""CuPy on a shared GPU: elementwise math, a run-time compiled kernel, a matmul and reductions, each
checked against NumPy.

    python3 examples/cupy_script.py
    nvshare-run -- python3 examples/cupy_script.py --json-out cupy.json

CuPy allocates through the CUDA runtime (cudaMalloc, from its memory pool), compiles kernels with NVRTC
and launches them with cuLaunchKernel; under libnvshare.so the allocations become device memory the
library maps itself (so that they can be swapped out) and every launch is scheduled. The results must not change. Prints one line "cupy_script: OK (N/N checks)"
(or FAIL with the failing checks) and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import cupy as cp
import numpy as np


def compare(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> dict:
    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    err = float(np.max(np.abs(got64 - ref64))) if got64.size else 0.0
    ok = got64.shape == ref64.shape and bool(np.allclose(got64, ref64, rtol=rtol, atol=atol))
    return {"name": name, "ok": ok, "max_abs_err": err, "shape": list(ref64.shape)}


def run_checks(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(1 << 20, dtype=np.float32)
    b = rng.standard_normal(1 << 20, dtype=np.float32)
    m = rng.standard_normal((512, 384), dtype=np.float32)
    n = rng.standard_normal((384, 256), dtype=np.float32)
    ga, gb = cp.asarray(a), cp.asarray(b)

    saxpy = cp.ElementwiseKernel("float32 x, float32 y, float32 alpha", "float32 z",
                                 "z = alpha * x + y", "xpushare_saxpy")
    square = cp.RawKernel(r"""
    extern "C" __global__ void xpushare_square(const float* x, float* y, int n) {
        int i = blockDim.x * blockIdx.x + threadIdx.x;
        if (i < n) y[i] = x[i] * x[i];
    }""", "xpushare_square")

    def raw_square() -> np.ndarray:
        out = cp.empty_like(ga)
        threads = 256
        square(((ga.size + threads - 1) // threads,), (threads,), (ga, out, np.int32(ga.size)))
        return cp.asnumpy(out)

    checks: list[tuple[str, Callable[[], np.ndarray], np.ndarray, float, float]] = [
        ("elementwise a*b+sin(a)", lambda: cp.asnumpy(ga * gb + cp.sin(ga)),
         a.astype(np.float64) * b + np.sin(a.astype(np.float64)), 1e-5, 1e-5),
        ("ElementwiseKernel saxpy (NVRTC)", lambda: cp.asnumpy(saxpy(ga, gb, np.float32(2.5))),
         2.5 * a.astype(np.float64) + b, 1e-5, 1e-5),
        ("RawKernel square", raw_square, a.astype(np.float64) ** 2, 1e-5, 1e-5),
        ("matmul 512x384 @ 384x256 (cuBLAS)", lambda: cp.asnumpy(cp.asarray(m) @ cp.asarray(n)),
         m.astype(np.float64) @ n, 1e-4, 1e-3),
        ("reductions sum/max/argmax", lambda: np.array([
            float(ga.sum()), float(ga.max()), float(gb.reshape(1024, 1024).argmax(axis=1).sum())]),
         np.array([a.astype(np.float64).sum(), a.max(), b.reshape(1024, 1024).argmax(axis=1).sum()]),
         1e-4, 1e-2),
    ]
    results = [compare(name, fn(), ref, rtol, atol) for name, fn, ref, rtol, atol in checks]
    cp.cuda.Stream.null.synchronize()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)

    results = run_checks(args.seed)
    free, total = cp.cuda.runtime.memGetInfo()
    passed = sum(r["ok"] for r in results)
    report = {"checks": results, "passed": passed, "total": len(results),
              "memory": {"free": free, "total": total}, "cupy": cp.__version__}
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1))
    if passed == len(results):
        print(f"cupy_script: OK ({passed}/{len(results)} checks)", flush=True)
        return 0
    failed = ", ".join(f"{r['name']} (max err {r['max_abs_err']:.3g})" for r in results if not r["ok"])
    print(f"cupy_script: FAIL ({passed}/{len(results)} checks): {failed}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
