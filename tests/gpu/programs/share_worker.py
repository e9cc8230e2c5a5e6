"""One of two PyTorch processes sharing a GPU: a fixed amount of GPU work, checked for correctness.

Each step computes a @ b (checked bit-for-bit against the first step's result, and that one against a
float64 CPU reference) and keeps the GPU busy for about --step-ms with torch.cuda._sleep. The worker
signals --ready-file after CUDA is initialised and waits for --peer-file, so that both processes
contend for the GPU during their whole main loop. It reports each step's start and end on
CLOCK_MONOTONIC (system-wide, so the two workers' timelines can be merged).

With --resident-mib N it also keeps N MiB resident and adds 1 to all of it every step: data that a
handoff moves to host and back (bulk eviction and prefetch) and that must come back intact; it is
checked exactly at the end.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from progutil import emit, library_loaded

CYCLES_PER_MS = 1.7e6  # GPU clock cycles per millisecond, roughly (H100/H200 run at 1.6-2.0 GHz)


def busy_gpu(ms: float) -> None:
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * CYCLES_PER_MS))
    else:  # no spin kernel in this PyTorch: matmuls of about the same duration
        m = torch.ones(2048, 2048, device="cuda")
        for _ in range(max(1, int(ms / 0.5))):
            m = m @ m * (1.0 / 2048)


def pattern(start: int, n: int) -> torch.Tensor:
    return (torch.arange(start, start + n, device="cuda", dtype=torch.int64) % 1000).float()


def make_resident(n: int, chunk: int = 1 << 24) -> torch.Tensor:
    out = torch.empty(n, device="cuda")
    for i in range(0, n, chunk):
        out[i:i + chunk] = pattern(i, min(chunk, n - i))
    return out


def resident_intact(resident: torch.Tensor, added: int, chunk: int = 1 << 24) -> bool:
    """Chunk by chunk, so that checking needs little memory beside the data itself."""
    return all(torch.equal(resident[i:i + chunk], pattern(i, min(chunk, resident.numel() - i)) + added)
               for i in range(0, resident.numel(), chunk))


def wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f}s")
        time.sleep(0.01)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--peer-file", type=Path, required=True)
    p.add_argument("--peer-timeout", type=float, default=120.0)
    p.add_argument("--resident-mib", type=int, default=0)
    args = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(args.seed)
    a_cpu = torch.randn(512, 512, generator=gen)
    b_cpu = torch.randn(512, 512, generator=gen)
    a, b = a_cpu.cuda(), b_cpu.cuda()
    first = a @ b
    resident = make_resident(args.resident_mib * (1 << 20) // 4) if args.resident_mib else None
    torch.cuda.synchronize()
    args.ready_file.touch()
    wait_for(args.peer_file, args.peer_timeout)

    intervals: list[tuple[float, float]] = []
    mismatched = 0
    for _ in range(args.steps):
        t0 = time.monotonic()
        c = a @ b
        if resident is not None:
            resident.add_(1.0)
        busy_gpu(args.step_ms)
        mismatched += not torch.equal(c, first)  # synchronises: the step's GPU work is done
        intervals.append((t0, time.monotonic()))

    ref = a_cpu.double() @ b_cpu.double()
    err = float((first.cpu().double() - ref).abs().max())
    resident_ok = resident is None or resident_intact(resident, args.steps)
    emit({"pid": os.getpid(), "steps": args.steps, "mismatched_steps": mismatched,
          "max_abs_err_vs_cpu": err, "resident_ok": resident_ok,
          "ok": mismatched == 0 and err < 1e-2 and resident_ok,
          "intervals": intervals, "library_loaded": library_loaded()})


if __name__ == "__main__":
    main()
