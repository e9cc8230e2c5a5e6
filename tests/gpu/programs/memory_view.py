"""What PyTorch is told about GPU memory, and whether allocating past the cap fails cleanly.

Reports torch.cuda.mem_get_info() before and after holding --hold-mib, then (with --oversize-mib)
tries one allocation of that size, which must raise torch.OutOfMemoryError when it is over the cap,
and then checks that a small allocation still works. torch.empty does not touch the memory, so
nothing here makes the GPU page anything in.
"""

from __future__ import annotations

import argparse

import torch
from progutil import emit, library_loaded

MIB = 1 << 20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hold-mib", type=int, default=1024)
    p.add_argument("--oversize-mib", type=int, default=0)
    args = p.parse_args()

    torch.zeros(1, device="cuda")
    free0, total0 = torch.cuda.mem_get_info()
    held = torch.empty(args.hold_mib * MIB, dtype=torch.uint8, device="cuda")
    free1, total1 = torch.cuda.mem_get_info()
    result = {"free_before": free0, "total_before": total0, "free_holding": free1,
              "total_holding": total1, "hold_bytes": held.numel(),
              "device_total_memory": torch.cuda.get_device_properties(0).total_memory,
              "library_loaded": library_loaded()}
    if args.oversize_mib:
        try:
            big = torch.empty(args.oversize_mib * MIB, dtype=torch.uint8, device="cuda")
            result["oversize"] = "allocated"
            del big
        except torch.OutOfMemoryError as e:
            result["oversize"] = "OutOfMemoryError"
            result["oversize_message"] = str(e).splitlines()[0]
        small = torch.ones(256 * MIB // 4, device="cuda")  # the process is still healthy
        result["small_after_ok"] = bool(small.sum().item() == small.numel())
    emit(result)


if __name__ == "__main__":
    main()
