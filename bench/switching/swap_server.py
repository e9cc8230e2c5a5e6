#!/usr/bin/env python3
"""An inference-like server for bench/switching/swap.py: S GiB of fp16 weights on the GPU (1 GiB matrices,
deterministic), and a request that reads every byte of them once (a chain of GEMVs, one per matrix)
and answers with the SHA-256 of the outputs, so that a response after a swap can be compared
bit for bit with the resident one.

With --rewrite every request also negates every weight after it answered (a write of all S GiB):
the next swap-out finds nothing still valid on the host and copies it all, and the responses
alternate between two values (even and odd requests of the server).

Protocol (stdin/stdout, one line each):
  -> ATTACHED                                with --wait-before-load: its CUDA context made (the
  <- load                                    library attached), nothing of its own allocated; it
                                             loads its weights at `load` (a newcomer's start-up)
  -> READY <load_ms>                         once the weights are on the GPU
  <- req <id>            -> done <id> <ms> <sha256>   ms: request received -> result on the host
  <- quit
Without a request it does nothing on the GPU, so the library gives the lock back (idle release) and
the scheduler may ask it to move its memory out (EVICT).

  python3 -m bench.switching.swap_server --gib 8            (run by bench/switching/swap.py under libnvshare.so)
  python3 -m bench.switching.swap_server --reference 8      pinned copies of 8 GiB each way, natively:
                                                  prints REFERENCE <h2d_s> <d2h_s> (1 GiB pieces)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

ROWS, COLS = 16384, 32768  # one fp16 matrix: 1 GiB


def reference(gib: float, reps: int = 3) -> None:
    """Pinned host <-> device copies of `gib` GiB in 1 GiB pieces (the best of `reps`): the bus
    time the swap's moves are judged against."""
    import torch

    piece = 1 << 30
    n = max(1, round(gib))
    host = torch.empty(piece, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(piece, dtype=torch.uint8, device="cuda")
    times = {"h2d": [], "d2h": []}
    for _ in range(reps):
        for way in ("h2d", "d2h"):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                (dev.copy_(host, non_blocking=True) if way == "h2d" else host.copy_(dev, non_blocking=True))
            torch.cuda.synchronize()
            times[way].append((time.perf_counter() - t) * gib / n)
    print(f"REFERENCE {min(times['h2d']):.6f} {min(times['d2h']):.6f}", flush=True)


def serve(gib: int, seed: int, rewrite: bool, wait_before_load: bool = False) -> None:
    import torch

    if wait_before_load:
        torch.empty(1, device="cuda")  # the context, and with it the library's ATTACH
        torch.cuda.synchronize()
        print("ATTACHED", flush=True)
        line = sys.stdin.readline().split()
        if line[:1] != ["load"]:
            return  # quit or end of input before the load
    t0 = time.perf_counter()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    weights = [torch.randn(ROWS, COLS, generator=gen, device="cuda", dtype=torch.float16) * 0.01
               for _ in range(gib)]
    x = torch.randn(COLS, generator=gen, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    print(f"READY {(time.perf_counter() - t0) * 1e3:.1f}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        t = time.perf_counter()
        out = torch.cat([w @ x for w in weights]).cpu()  # the .cpu() waits for the GPU
        ms = (time.perf_counter() - t) * 1e3
        digest = hashlib.sha256(out.numpy().tobytes()).hexdigest()
        print(f"done {words[1]} {ms:.3f} {digest}", flush=True)
        if rewrite:
            for w in weights:
                w.neg_()
            torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=int, help="weights, GiB (whole 1 GiB matrices)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rewrite", action="store_true", help="negate the weights after each request")
    ap.add_argument("--wait-before-load", action="store_true",
                    help="make the CUDA context, print ATTACHED and load the weights at a `load` line")
    ap.add_argument("--reference", type=float, metavar="GIB", help="only time pinned copies of GIB")
    args = ap.parse_args()
    if args.reference:
        reference(args.reference)
    elif args.gib:
        serve(args.gib, args.seed, args.rewrite, args.wait_before_load)
    else:
        ap.error("--gib or --reference is required")


if __name__ == "__main__":
    main()
