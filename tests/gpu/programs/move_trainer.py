"""A small deterministic training loop for tests/gpu/test_move.py: an MLP on fixed, seeded data,
STEPS steps with a synchronise and a pause after each (so that a move lands mid-run); each step's
loss as an exact float (hex). After --announce-at steps it writes --ready-file (the test then moves
it). At the end: the losses and the UUID the driver gives its device 0, before and after.

    python3 move_trainer.py --steps N --step-ms MS [--announce-at K --ready-file F]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402

from progutil import emit, library_loaded, mark  # noqa: E402


def device0_uuid() -> str:
    """What the driver says of device 0 now (not PyTorch, which keeps what it read at its start)."""
    u = (ctypes.c_ubyte * 16)()
    if ctypes.CDLL("libcuda.so.1").cuDeviceGetUuid_v2(u, 0) != 0:
        return "unknown"
    b = bytes(u).hex()
    return f"GPU-{b[:8]}-{b[8:12]}-{b[12:16]}-{b[16:20]}-{b[20:]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--announce-at", type=int, default=50)
    ap.add_argument("--ready-file", type=Path)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    dev = torch.device("cuda", 0)
    before = device0_uuid()
    x = torch.randn(256, 512, device=dev)
    y = torch.randn(256, 10, device=dev)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())  # .item() synchronises
        if step + 1 == args.announce_at and args.ready_file:
            mark("announce")
            args.ready_file.write_text(str(os.getpid()))
        time.sleep(args.step_ms / 1000)
    torch.cuda.synchronize()
    emit({"losses": losses, "uuid_before": before, "uuid_after": device0_uuid(),
          "library": library_loaded()})


if __name__ == "__main__":
    main()
