#!/usr/bin/env python3
"""One workload of bench/observability/busy_accuracy.py, or (--reference) the native per-kernel times its GPU time
is judged by.

    busy_workload.py --pattern P --seconds S --warm F --go F --ready F --done F
    busy_workload.py --reference [--brackets]

Patterns (each kernel is one of two kinds):
  burst30   bursts of 30 adds of 256 MiB vectors (memory-bound, ~0.25 ms each on an H100),
            a synchronise after each burst, then 10 ms asleep
  burst8    bursts of 8 such adds, then 25 ms asleep
  saturate  the same adds back to back (a synchronise every 200)
  tiny      tiny adds of 1024 elements, launched as fast as Python can (launch-bound: the GPU is
            idle between them), a synchronise every 2000

The program counts the kernels it ran after --go; their true GPU time is that count times the time
one such kernel takes on the GPU alone (the reference). It never records events of its own while
measured: what the library sees is exactly the workload.

--reference (run without the library) measures the per-kernel GPU times with CUDA events around
2000 kernels queued back to back behind a spin kernel, so that neither launch gaps nor the host
are in them (median of 5), and, with --brackets, what events around each burst of burst30/burst8
say, which shows whether a burst takes its kernels' time or more on the GPU.
GPU safety: three 256 MiB vectors (768 MiB) per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

PATTERNS = {  # name: (kernel kind, kernels per burst, sleep after a burst in s)
    "burst30": ("add", 30, 0.010),
    "burst8": ("add", 8, 0.025),
    "saturate": ("add", 200, 0.0),
    "tiny": ("tiny", 2000, 0.0),
}
ADD_ELEMENTS = 64 << 20   # float32: 256 MiB per vector
TINY_ELEMENTS = 1024
REFERENCE_KERNELS = 2000
SPIN_CYCLES = 200_000_000  # ~0.1 s: the host queues the measured kernels behind it


def kernels(torch):
    dev = torch.device("cuda")
    a = torch.ones(ADD_ELEMENTS, device=dev)
    b = torch.ones(ADD_ELEMENTS, device=dev)
    c = torch.empty(ADD_ELEMENTS, device=dev)
    x = torch.zeros(TINY_ELEMENTS, device=dev)
    return {"add": lambda: torch.add(a, b, out=c), "tiny": lambda: x.add_(1.0)}


def queued_ms(torch, step, n: int = REFERENCE_KERNELS) -> float:
    """GPU time of one kernel, n of them queued back to back behind a spin kernel."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SPIN_CYCLES)
    start.record()
    for _ in range(n):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def bracketed(torch, step, per_burst: int, sleep_s: float, bursts: int = 40) -> dict:
    """Events around each burst (and each kernel of it): what a burst takes on the GPU natively."""
    spans, firsts, rests = [], [], []
    for _ in range(bursts):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(per_burst + 1)]
        ev[0].record()
        for i in range(per_burst):
            step()
            ev[i + 1].record()
        torch.cuda.synchronize()
        spans.append(ev[0].elapsed_time(ev[-1]))
        firsts.append(ev[0].elapsed_time(ev[1]))
        rests += [ev[i].elapsed_time(ev[i + 1]) for i in range(1, per_burst)]
        time.sleep(sleep_s)
    return {"burst_ms": statistics.median(spans), "first_kernel_ms": statistics.median(firsts),
            "other_kernels_ms": statistics.median(rests)}


def reference(brackets: bool) -> dict:
    import torch

    steps = kernels(torch)
    for step in steps.values():  # warm up: code, clocks
        for _ in range(50):
            step()
    torch.cuda.synchronize()
    out = {f"{kind}_ms": statistics.median(queued_ms(torch, step) for _ in range(5))
           for kind, step in steps.items()}
    if brackets:
        for name, (kind, per_burst, sleep_s) in PATTERNS.items():
            if sleep_s:
                out[name] = bracketed(torch, steps[kind], per_burst, sleep_s)
    return out


def run(args) -> int:
    import torch

    kind, per_burst, sleep_s = PATTERNS[args.pattern]
    step = kernels(torch)[kind]
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    open(args.warm, "w").close()
    wait_for(args.go)
    done, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < args.seconds:
        for _ in range(per_burst):
            step()
        torch.cuda.synchronize()
        done += per_burst
        if sleep_s:
            time.sleep(sleep_s)
    result = {"pattern": args.pattern, "kind": kind, "kernels": done,
              "wall_s": time.monotonic() - t0, "pid": os.getpid()}
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, args.ready)
    wait_for(args.done)
    return 0


def wait_for(path: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", action="store_true", help="measure the per-kernel GPU times")
    p.add_argument("--brackets", action="store_true", help="with --reference: bursts in events too")
    p.add_argument("--pattern", choices=sorted(PATTERNS))
    p.add_argument("--seconds", type=float, default=4.0, help="time spent in the measured work")
    for name in ("warm", "go", "ready", "done"):
        p.add_argument(f"--{name}")
    args = p.parse_args(argv)
    if not args.reference and not (args.pattern and args.warm and args.go and args.ready and
                                   args.done):
        p.error("--pattern, --warm, --go, --ready and --done are needed (or --reference)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.reference:
        print(json.dumps(reference(args.brackets)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
