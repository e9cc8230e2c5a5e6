"""A little of everything PyTorch asks of the driver: allocations, copies both ways (pinned, async),
cuBLAS, cuDNN, a memset, a side stream, a CUDA graph replay, and all of it again on a second thread.
Used to see that every driver entry point it looks up is matched by the library (NVSHARE_DEBUG).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from progutil import emit, library_loaded


def work() -> float:
    torch.manual_seed(0)  # both threads compute the same thing
    x = torch.randn(512, 512, device="cuda")
    y = (x @ x).relu()
    z = F.conv2d(torch.randn(4, 3, 32, 32, device="cuda"), torch.randn(8, 3, 3, 3, device="cuda"))
    pinned = torch.empty(512, 512, pin_memory=True)
    pinned.copy_(y, non_blocking=True)
    back = torch.zeros(512, 512, device="cuda")
    back.copy_(pinned, non_blocking=True)
    back.zero_()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        w = y * 2
    side.synchronize()
    g = torch.cuda.CUDAGraph()
    static = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        static * 3
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = static * 3
    g.replay()
    torch.cuda.synchronize()
    return float(y.sum().cpu() + z.sum().cpu() + w.sum().cpu() + out.sum().cpu() + back.sum().cpu())


def main() -> None:
    value = work()
    thread_values: list[float] = []
    t = threading.Thread(target=lambda: thread_values.append(work()))  # a second thread, own state
    t.start()
    t.join()
    emit({"value": value, "thread_value": thread_values[0] if thread_values else None,
          "library_loaded": library_loaded()})


if __name__ == "__main__":
    main()
