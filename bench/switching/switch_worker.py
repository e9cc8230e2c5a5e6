#!/usr/bin/env python3
"""A, the GPU process of the switch-cost benchmark (bench/switching/switch_cost.py starts it under libnvshare.so).

Per size W (GiB): allocate W GiB in one float32 tensor, loop passes `x.add_(1.0);
torch.cuda.synchronize()` recording (t_start, t_end) of each with time.monotonic(), write where it is
to CONTROL/progress (one fixed-size line, rewritten in place), touch CONTROL/steady-W after the warm
passes, stop when CONTROL/stop-W appears, then write CONTROL/passes-W.json (the passes and whether every
element equals the number of passes: the data survived every eviction and prefetch) and free it.

    python3 -m bench.switching.switch_worker --sizes 1,4,8 --control DIR [--warm-passes 20]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

GIB = 1 << 30
MIB = 1 << 20
PROGRESS_BYTES = 64


def size_key(w: float) -> str:
    return f"{w:g}"


def worker(sizes: list[float], ctrl: Path, warm_passes: int) -> int:
    """Run under libnvshare.so: per size, allocate, loop passes until told to stop, dump the passes."""
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    fd = os.open(ctrl / "progress", os.O_RDWR | os.O_CREAT, 0o644)
    for w in sizes:
        key = size_key(w)
        x = torch.zeros(int(w * GIB) // 4, dtype=torch.float32, device=dev)
        torch.cuda.synchronize()
        stop = ctrl / f"stop-{key}"
        passes: list[tuple[float, float]] = []
        while True:
            t0 = time.monotonic()
            x.add_(1.0)
            torch.cuda.synchronize()
            t1 = time.monotonic()
            passes.append((t0, t1))
            # Outside the timed part: where A is, for the benchmark process to follow.
            os.pwrite(fd, f"{key} {len(passes)} {t1:.6f}".ljust(PROGRESS_BYTES - 1).encode() + b"\n", 0)
            if len(passes) == warm_passes:
                (ctrl / f"steady-{key}").touch()
            if stop.exists():
                break
        lo, hi = x.min().item(), x.max().item()
        out = {"size_gib": w, "passes": passes, "min": lo, "max": hi,
               "data_ok": lo == hi == float(len(passes))}
        tmp = ctrl / f"passes-{key}.json.tmp"
        tmp.write_text(json.dumps(out))
        tmp.rename(ctrl / f"passes-{key}.json")
        del x
        torch.cuda.empty_cache()
    os.close(fd)
    return 0


class Progress:
    """What A last wrote to its progress file: (size key, passes, end of the last pass)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def read(self) -> tuple[str, int, float] | None:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        return parse_progress(os.pread(self.fd, PROGRESS_BYTES, 0))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def parse_progress(raw: bytes) -> tuple[str, int, float] | None:
    """None for a line being rewritten (or not written yet)."""
    try:
        key, count, t_end = raw.decode().split()
        return key, int(count), float(t_end)
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", required=True, type=lambda s: [float(w) for w in s.split(",") if w.strip()],
                   help="GiB, comma-separated")
    p.add_argument("--control", type=Path, required=True)
    p.add_argument("--warm-passes", type=int, default=20)
    args = p.parse_args(argv)
    return worker(args.sizes, args.control, args.warm_passes)


if __name__ == "__main__":
    raise SystemExit(main())
