#!/usr/bin/env python3
"""One workload of bench/quota_limits.py, run under libnvshare.so: back-to-back matrix products
(a saturating GPU program), its throughput in products per second.

    quota_workload.py --seconds S --warm F --go F --ready F [--matrix N] [--dtype float16]

After its warm-up (allocation, cuBLAS set-up, a few products) it synchronises, creates the file
--warm and waits until the file --go exists (so that the processes of a pair start together).
Then it issues products for S seconds of wall time without synchronising (only the library's
in-flight bound holds it back), synchronises, and writes {"iterations", "wall_s", "ips", "pid"} to
the file --ready: iterations per second from the synchronisation before the first to the one after
the last. GPU safety: three N x N matrices (3 x 32 MiB for 4096 in 16 bits).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CHUNK = 8  # products issued between two looks at the clock


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0, help="wall time of the measured run")
    p.add_argument("--matrix", type=int, default=4096)
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    p.add_argument("--warm", required=True, help="create this after the warm-up")
    p.add_argument("--go", required=True, help="start the measured run once this file exists")
    p.add_argument("--ready", required=True, help="write the result here")
    return p.parse_args(argv)


def wait_for(path: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.matrix, args.matrix, device=dev, dtype=dtype)
    b = torch.randn(args.matrix, args.matrix, device=dev, dtype=dtype)
    c = torch.empty(args.matrix, args.matrix, device=dev, dtype=dtype)
    for _ in range(20):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    open(args.warm, "w").close()
    wait_for(args.go)

    torch.cuda.synchronize()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < args.seconds:
        for _ in range(CHUNK):
            torch.mm(a, b, out=c)
        n += CHUNK
    torch.cuda.synchronize()
    wall = time.monotonic() - t0
    result = {"iterations": n, "wall_s": wall, "ips": n / wall, "pid": os.getpid(),
              "start": t0, "end": t0 + wall}
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, args.ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
