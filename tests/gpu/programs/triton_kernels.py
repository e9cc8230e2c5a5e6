"""Two Triton kernels (vector add, row softmax) compiled and launched, checked against PyTorch.

Triton compiles with its own toolchain (ptxas runs as a child process, under LD_PRELOAD too) and
launches through cuLaunchKernelEx, which its launcher looks up with dlsym on libcuda.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from progutil import emit, library_loaded


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def vector_add() -> dict:
    n = 98_432  # not a multiple of the block: the mask matters
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    ref = x + y
    return {"name": "vector_add", "ok": bool(torch.equal(out, ref)),
            "max_abs_err": float((out - ref).abs().max())}


def softmax() -> dict:
    x = torch.randn(1823, 781, device="cuda")
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1],
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    ref = torch.softmax(x, dim=1)
    err = float((out - ref).abs().max())
    return {"name": "softmax", "ok": bool(torch.allclose(out, ref, rtol=1e-5, atol=1e-6)),
            "max_abs_err": err}


def main() -> None:
    torch.manual_seed(0)
    checks = [vector_add(), softmax()]
    torch.cuda.synchronize()
    emit({"checks": checks, "triton": triton.__version__, "library_loaded": library_loaded(),
          "memory_total": torch.cuda.mem_get_info()[1]})


if __name__ == "__main__":
    main()
