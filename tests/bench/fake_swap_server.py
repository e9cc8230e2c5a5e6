"""A stand-in for bench/switching/swap_server.py without a GPU, for tests.

It speaks the server's stdin/stdout protocol (REFERENCE; ATTACHED and load with --wait-before-load;
READY; req -> done with a SHA-256 that depends only on the seed and, with --rewrite, the request's
parity) and writes the library's NVSHARE_DEBUG lines that bench/switching/swap.py reads:
- each request after the other server's (their shared FAKE_SWAP_DIR/last says who answered last;
  the first started is a) logs
  its eviction (at the request, not when it happened) and its swap-in; the first eviction takes
  COLD_MS, or WARM_MS once its copies were pinned ahead, later ones WARM_MS;
- when the other server says ATTACHED (FAKE_SWAP_DIR/attached) and FAKE_PIN_AHEAD is 1 (what the
  test's scheduler was told: no --no-pin-ahead), it logs its host copies pinned ahead PIN_S later.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading
import time
from pathlib import Path

GIB = 1 << 30
COLD_MS, WARM_MS, SWAPIN_MS, PIN_S = 800.0, 200.0, 190.0, 0.2
pinned = threading.Event()


def log(line: str) -> None:
    print(f"[nvshare] {line}", file=sys.stderr, flush=True)


def pin_ahead_when_attached(shared: Path, size: int) -> None:
    while not (shared / "attached").exists():
        time.sleep(0.02)
    time.sleep(PIN_S)
    log("device 0: a swap-out is likely soon: pinning host copies ahead")
    log(f"device 0: host copies pinned ({size >> 20} MiB of them ahead of a swap-out; {size >> 20} MiB held)")
    pinned.set()


def serve(gib: int, seed: int, rewrite: bool, wait: bool) -> None:
    shared, size = Path(os.environ["FAKE_SWAP_DIR"]), gib * GIB + (64 << 20)
    try:  # the first started is server a
        os.close(os.open(shared / "a", os.O_CREAT | os.O_EXCL))
        name = "a"
    except FileExistsError:
        name = "b"
    if wait:
        print("ATTACHED", flush=True)
        (shared / "attached").touch()
        if sys.stdin.readline().split()[:1] != ["load"]:
            return
    if name == "a" and os.environ.get("FAKE_PIN_AHEAD") == "1":
        threading.Thread(target=pin_ahead_when_attached, args=(shared, size), daemon=True).start()
    print("READY 1.0", flush=True)
    n, evictions, mine = 0, 0, False  # mine: the memory is on the GPU
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        last = shared / "last"
        other_ran = last.exists() and last.read_text() != name
        if other_ran and mine:
            ms = COLD_MS if evictions == 0 and not pinned.is_set() else WARM_MS
            log(f"device 0: evicted 1 range(s), {size} bytes, to the swap store (0 of them clean: discarded "
                f"without a copy) and 0 range(s), 0 bytes, by prefetch to the host in {ms:.1f} ms")
            if evictions == 0:
                log("device 0: host copies pinned while copying (4 pinners; 9288 MiB held)")
            evictions += 1
            mine = False
        ms = 3.0
        if not mine and n:
            log(f"device 0: swap-in of 1 range(s), {size} bytes, and prefetch of 0 range(s), 0 bytes, to the "
                f"device done in {SWAPIN_MS:.1f} ms")
            ms += SWAPIN_MS
        mine = True
        last.write_text(name)
        digest = hashlib.sha256(f"{seed}-{n % 2 if rewrite else 0}".encode()).hexdigest()
        print(f"done {words[1]} {ms:.3f} {digest}", flush=True)
        n += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rewrite", action="store_true")
    ap.add_argument("--wait-before-load", action="store_true")
    ap.add_argument("--reference", type=float)
    args = ap.parse_args()
    if args.reference:
        print(f"REFERENCE {args.reference * GIB / 50e9:.6f} {args.reference * GIB / 50e9:.6f}", flush=True)
    else:
        serve(args.gib, args.seed, args.rewrite, args.wait_before_load)


if __name__ == "__main__":
    main()
