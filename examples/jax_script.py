#!/usr/bin/env python3
"""JAX on a shared GPU: jit-compiled functions (a layer, its gradient, a loop) checked against NumPy.

    XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false python3 examples/jax_script.py
    nvshare-run -- python3 examples/jax_script.py           # nvshare-run sets both variables

JAX's default allocator takes 75% of the GPU memory it is shown (XLA_PYTHON_CLIENT_MEM_FRACTION)
up front and keeps it for the process's life: under libnvshare.so, 75% of the virtual capacity,
held whether the program uses it or not. With XLA_PYTHON_CLIENT_ALLOCATOR=platform it allocates
through cudaMalloc on demand and frees what it no longer needs, which libnvshare.so converts and
can swap out; PREALLOCATE=false stops the up-front grab. Both give the same results.
Prints one line "jax_script: OK (N/N checks) ..." (or FAIL) and exits 1 when a check fails; with
--json-out, each check's error against NumPy and the sha256 of its result's bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

# Compare full float32 math with NumPy: no TF32 shortcuts in matmuls.
jax.config.update("jax_default_matmul_precision", "highest")


@jax.jit
def layer(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


@jax.jit
def layer_grad(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.grad(lambda w_: jnp.sum(jnp.tanh(x @ w_)))(w)


@jax.jit
def iterate(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, 50, lambda _, v: 0.9 * v + 0.1 * jnp.sin(v), x)


def np_iterate(x: np.ndarray) -> np.ndarray:
    for _ in range(50):
        x = 0.9 * x + 0.1 * np.sin(x)
    return x


def compare(name: str, got, ref: np.ndarray, rtol: float, atol: float) -> dict:
    """Close to NumPy's float64 answer, and the result's exact bytes (sha256), so that two runs can
    be compared bit for bit."""
    exact = np.asarray(got)
    got64 = exact.astype(np.float64)
    err = float(np.max(np.abs(got64 - ref))) if ref.size else 0.0
    ok = got64.shape == ref.shape and bool(np.allclose(got64, ref, rtol=rtol, atol=atol))
    return {"name": name, "ok": ok, "max_abs_err": err,
            "sha256": hashlib.sha256(np.ascontiguousarray(exact).tobytes()).hexdigest()}


def run_checks(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((256, 512), dtype=np.float32)
    w = rng.standard_normal((512, 128), dtype=np.float32) / np.float32(np.sqrt(512))
    v = rng.standard_normal(1 << 16, dtype=np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    h = np.tanh(x64 @ w64)
    return [
        compare("jit tanh(x @ w)", layer(x, w), h, 1e-4, 1e-5),
        compare("jit grad of sum(tanh(x @ w))", layer_grad(x, w), x64.T @ (1.0 - h * h), 1e-4, 1e-3),
        compare("jit fori_loop", iterate(v), np_iterate(v.astype(np.float64)), 1e-4, 1e-5),
        compare("sum of squares", jnp.sum(jnp.asarray(v) ** 2), np.array((v.astype(np.float64) ** 2).sum()),
                1e-4, 1e-2),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)

    device = jax.devices()[0]
    allocator = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default")
    results = run_checks(args.seed)
    passed = sum(r["ok"] for r in results)
    stats = device.memory_stats() or {}  # None on the CPU
    report = {"checks": results, "passed": passed, "total": len(results), "platform": device.platform,
              "device": str(device), "allocator": allocator, "jax": jax.__version__,
              "pool_bytes": stats.get("bytes_limit")}  # what the allocator may hold, its pool's size
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1))
    status = "OK" if passed == len(results) else "FAIL"
    failed = "".join(f"; {r['name']} (max err {r['max_abs_err']:.3g})" for r in results if not r["ok"])
    print(f"jax_script: {status} ({passed}/{len(results)} checks) platform={device.platform} "
          f"allocator={allocator}{failed}", flush=True)
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
