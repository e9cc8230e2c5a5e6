#!/usr/bin/env python3
"""One workload of bench/quotas/quota_limits.py, run under libnvshare.so: back-to-back matrix products
(a saturating GPU program), its throughput in products per second.

    quota_workload.py --seconds S --warm F --go F --ready F [--matrix N] [--dtype float16]
                      [--op matmul|add] [--graph] [--trace-every N]

--op add: element-wise sums of two vectors of --elements 16-bit numbers instead (bound by the GPU's
memory bandwidth, not its arithmetic: it draws less power, so the GPU is not held at its power cap
when it runs alone); "products" then counts sums.

After its warm-up (allocation, cuBLAS set-up, a few products) it synchronises, creates the file
--warm and waits until the file --go exists (so that the processes of a pair start together).
Then it issues products for S seconds of wall time without synchronising (only the library's
in-flight bound holds it back), synchronises, and writes {"iterations", "wall_s", "ips", "pid",
"start", "end"} to the file --ready: iterations per second from the synchronisation before the
first to the one after the last ("start": time.monotonic() right after that first synchronisation).

--graph: the products are captured, GRAPH_PRODUCTS at a time, into one CUDA graph (warmed up on a
side stream first, as PyTorch's capture wants), which the loop replays; iterations still count
products. It shows that a graph launch is bound by the limit like the launches it holds.

--trace-every N: a timing CUDA event at the start and one after every N products; the result gets
"trace", a list of [seconds since the start event, products completed], on the GPU's clock (the
host's clock says when work was enqueued, and under the library's gate that is in bursts).
GPU safety: three N x N matrices (3 x 32 MiB for 4096 in 16 bits); --op add: three vectors
(3 x 128 MiB for the default 64 Mi elements).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CHUNK = 8            # products issued between two looks at the clock
GRAPH_PRODUCTS = 8   # products in the graph: one replay is one chunk


def _trace_every(text: str) -> int:
    value = int(text)
    if value <= 0 or value % CHUNK:
        raise argparse.ArgumentTypeError(f"--trace-every must be a positive multiple of {CHUNK}")
    return value


def _elements(text: str) -> int:
    value = int(text)
    if not 0 < value <= 1 << 30:
        raise argparse.ArgumentTypeError("--elements must be from 1 to 2**30")
    return value


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0, help="wall time of the measured run")
    p.add_argument("--matrix", type=int, default=4096)
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16")
    p.add_argument("--op", choices=("matmul", "add"), default="matmul",
                   help="matrix products (bound by arithmetic) or vector sums (by memory bandwidth)")
    p.add_argument("--elements", type=_elements, default=64 << 20,
                   help="vector length for --op add (at most 2**30)")
    p.add_argument("--warm", required=True, help="create this after the warm-up")
    p.add_argument("--go", required=True, help="start the measured run once this file exists")
    p.add_argument("--ready", required=True, help="write the result here")
    p.add_argument("--graph", action="store_true",
                   help=f"replay a CUDA graph of {GRAPH_PRODUCTS} products instead of launching them")
    p.add_argument("--trace-every", type=_trace_every, default=0, metavar="N",
                   help=f"record a CUDA event every N products (a multiple of {CHUNK})")
    return p.parse_args(argv)


def wait_for(path: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def write_result(path: str, result: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, path)  # the benchmark never reads half a file


def _step(torch, one, graph: bool):
    """One chunk of CHUNK operations (one(): issue one): a function that issues it."""
    if not graph:
        def launch():
            for _ in range(CHUNK):
                one()
        return launch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture wants cuBLAS's workspace set up off the capture stream
        for _ in range(3):
            one()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(GRAPH_PRODUCTS):
            one()
    return g.replay


def _operation(torch, args):
    """The operation the workload repeats, on tensors made here: a function that issues one."""
    dev, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    if args.op == "add":
        shape = (args.elements,)
    else:
        shape = (args.matrix, args.matrix)
    a = torch.randn(*shape, device=dev, dtype=dtype)
    b = torch.randn(*shape, device=dev, dtype=dtype)
    c = torch.empty(*shape, device=dev, dtype=dtype)
    if args.op == "add":
        return lambda: torch.add(a, b, out=c)
    return lambda: torch.mm(a, b, out=c)


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    one = _operation(torch, args)
    for _ in range(20):
        one()
    step = _step(torch, one, args.graph)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    open(args.warm, "w").close()
    wait_for(args.go)

    events = []
    start = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    start.record()
    n = 0
    while time.monotonic() - t0 < args.seconds:
        step()
        n += CHUNK
        if args.trace_every and n % args.trace_every == 0:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            events.append((ev, n))
    torch.cuda.synchronize()
    wall = time.monotonic() - t0
    result = {"iterations": n, "wall_s": wall, "ips": n / wall, "pid": os.getpid(),
              "start": t0, "end": t0 + wall, "graph": args.graph, "op": args.op}
    if args.trace_every:
        result["trace"] = [[0.0, 0]] + [[start.elapsed_time(ev) / 1000.0, k] for ev, k in events]
    write_result(args.ready, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
