#!/usr/bin/env python3
"""One workload of bench/busy_accuracy.py, run under libnvshare.so: GPU work in bursts, each timed
by the program itself with CUDA events (torch.cuda.Event(enable_timing=True) recorded before the
burst's first kernel and after its last, then a synchronise), the reference the library's busy time
is compared with.

    busy_workload.py --pattern saturate|bursts|tiny --seconds S --warm F --go F --ready F --done F

  saturate  back-to-back matrix products (a synchronise every ~0.25 s between bursts, no pause)
  bursts    the same bursts, each followed by a host pause as long as the burst (GPU idle)
  tiny      bursts of 5000 tiny element-wise kernels (launch-bound), no pause

After its warm-up (allocation, calibration: GPU time the program does not time) it synchronises,
creates the file --warm and waits until the file --go exists: the benchmark reads the busy time
so far there, and compares only what comes after. When the work is done it writes {"pattern", "events_s", "bursts", "wall_s"} to FILE (--ready) and
waits (at most 300 s) until the file --done exists, so that its exporter series is still there when
the benchmark scrapes it. GPU safety: it allocates under 256 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

PATTERNS = ("saturate", "bursts", "tiny")
MATRIX = 2048        # 3 float32 matrices of 16 MiB
TINY_KERNELS = 5000  # per burst
TINY_ELEMENTS = 1024
BURST_TARGET_S = 0.25


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pattern", choices=PATTERNS, required=True)
    p.add_argument("--seconds", type=float, default=8.0, help="time spent in bursts (pauses excluded)")
    p.add_argument("--warm", required=True, help="create this after the warm-up")
    p.add_argument("--go", required=True, help="start the measured bursts once this file exists")
    p.add_argument("--ready", required=True, help="write the result here when the work is done")
    p.add_argument("--done", required=True, help="exit once this file exists")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    dev = torch.device("cuda")
    if args.pattern == "tiny":
        x = torch.zeros(TINY_ELEMENTS, device=dev)

        def step():
            x.add_(1.0)
        per_burst = TINY_KERNELS
    else:
        a = torch.randn(MATRIX, MATRIX, device=dev)
        b = torch.randn(MATRIX, MATRIX, device=dev)
        c = torch.empty(MATRIX, MATRIX, device=dev)

        def step():
            torch.mm(a, b, out=c)
        # calibrate: how many products make a burst of about BURST_TARGET_S
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        per_burst = max(1, round(BURST_TARGET_S / max(1e-6, (time.perf_counter() - t) / 10)))
    torch.cuda.synchronize()
    open(args.warm, "w").close()
    wait_for(args.go)

    events_s, bursts, t0 = 0.0, 0, time.monotonic()
    while events_s < args.seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_burst):
            step()
        end.record()
        torch.cuda.synchronize()
        burst = start.elapsed_time(end) / 1e3
        events_s += burst
        bursts += 1
        if args.pattern == "bursts":
            time.sleep(burst)
    result = {"pattern": args.pattern, "events_s": events_s, "bursts": bursts,
              "per_burst": per_burst, "wall_s": time.monotonic() - t0, "pid": os.getpid()}
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, args.ready)
    wait_for(args.done)
    return 0


def wait_for(path: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
