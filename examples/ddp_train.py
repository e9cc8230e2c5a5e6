#!/usr/bin/env python3
"""A small, deterministic DistributedDataParallel training job, launched by torchrun.

Each rank trains the same MLP (same initial weights, from --seed) on synthetic data of its own
(seeded by --seed and its rank); DDP averages the gradients. The losses and final parameters depend
only on --seed, --steps and the world size: with the gloo backend and fp32 they are the same bit for
bit from run to run on one machine, which is what lets a benchmark compare jobs that shared the GPU
under libnvshare.so with a job that ran alone.

    torchrun --nproc-per-node 2 --master-port 29500 --rdzv-id job-a examples/ddp_train.py --steps 300
    nvshare-run -- torchrun --nproc-per-node 2 examples/ddp_train.py --json-out run.json

The backend is nccl when there are at least LOCAL_WORLD_SIZE GPUs, else gloo (NCCL refuses two ranks
on one GPU; gloo all-reduces CUDA tensors through the host); --backend overrides it. Rank r uses
cuda:(LOCAL_RANK % device count), or the CPU when there is no GPU. Nothing is printed per step; at the
end rank 0 prints one line "ddp_train: steps=.. final_loss=.. params_sha256=.. seconds=.." and, with
--json-out, writes {"losses", "params_sha256", "seconds", "backend", "world_size", ...}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

# cuBLAS is deterministic only with a fixed workspace configuration, set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

CLASSES = 10
DATA_POOL = 8  # distinct batches per rank, cycled: few enough to stay small on the GPU


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights and every rank's data")
    p.add_argument("--width", type=int, default=1024, help="hidden width of the MLP (default 1024)")
    p.add_argument("--batch-size", type=int, default=256, help="per rank (default 256)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32 (default; bit-reproducible with gloo) or bf16 autocast")
    p.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with a GPU per local rank")
    p.add_argument("--json-out", type=Path, help="rank 0 writes its losses and checksum here")
    args = p.parse_args(argv)
    if args.steps < 1 or args.width < 8 or args.batch_size < 1:
        p.error("--steps, --width and --batch-size must be positive (width at least 8)")
    return args


def pick_backend(choice: str | None, local_world: int) -> str:
    if choice:
        return choice
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "nccl" if gpus >= local_world else "gloo"


def pick_device(local_rank: int) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def make_model(width: int, seed: int) -> nn.Module:
    # Every rank builds the same weights from the same seed (DDP would broadcast rank 0's anyway;
    # this keeps a rank's first step independent of the broadcast's timing).
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, CLASSES))


def make_data(seed: int, rank: int, batch: int, device: torch.device) -> list[tuple]:
    # Generated on the CPU with its own generator, so the data is the same on any device.
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    centers = torch.randn(CLASSES, 256, generator=g)
    pool = []
    for _ in range(DATA_POOL):
        y = torch.randint(0, CLASSES, (batch,), generator=g)
        x = centers[y] + 2.0 * torch.randn(batch, 256, generator=g)
        pool.append((x.to(device), y.to(device)))
    return pool


def params_sha256(model: nn.Module) -> str:
    """sha256 over the exact bytes of every parameter, in order."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def train(args: argparse.Namespace) -> dict | None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    backend = pick_backend(args.backend, local_world)
    device = pick_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn, not fail, on an op without one
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would make fp32 depend on the GPU's kernels
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    try:
        model = DDP(make_model(args.width, args.seed).to(device),
                    device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = make_data(args.seed, rank, args.batch_size, device)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
        dist.barrier()
        t0 = time.monotonic()
        losses = []
        for step in range(args.steps):
            x, y = data[step % DATA_POOL]
            with autocast:
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        seconds = time.monotonic() - t0
        if rank != 0:
            return None
        # The losses stay on the GPU until the end: reading each one would synchronise every step.
        return {"losses": [float(v) for v in torch.stack(losses).float().cpu()],
                "params_sha256": params_sha256(model.module), "seconds": seconds,
                "backend": backend, "world_size": world, "steps": args.steps, "dtype": args.dtype,
                "device": str(device), "run_id": os.environ.get("TORCHELASTIC_RUN_ID")}
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = train(args)
    if result is None:
        return 0
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    print(f"ddp_train: steps={result['steps']} final_loss={result['losses'][-1]:.6f} "
          f"params_sha256={result['params_sha256']} seconds={result['seconds']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
