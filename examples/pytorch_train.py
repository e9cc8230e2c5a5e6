#!/usr/bin/env python3
"""A small, deterministic PyTorch training job: the reference workload of XPUShare's GPU tests.

A convolutional network (3 conv + 2 linear layers) learns to classify synthetic images (noise plus a
per-class tint and stripe pattern) with AdamW and bfloat16 autocast. The same --seed gives the same inputs,
the same initial weights and, with --deterministic (the default), the same losses and final parameters,
bit for bit, on the same machine: that is what lets a test compare a run under libnvshare.so with a
native one. Runs on the GPU when there is one, else on the CPU (slowly; fine for a smoke test).

    python3 examples/pytorch_train.py                              # 200 steps, prints one result line
    nvshare-run -- python3 examples/pytorch_train.py --steps 500   # the same, scheduled by XPUShare
    python3 examples/pytorch_train.py --steps 50 --json-out run.json   # losses + parameter checksum

Options used by the benchmarks: --time (synchronise and time every step), --width/--batch-size/
--image-size (model and input size), --loader-workers/--data-delay-ms (a DataLoader with worker
processes that spend CPU time on each batch, like decoding and augmentation), --idle-tail-s (keep the
CUDA context but submit nothing for a while after training, so an idle release can be observed).
The last line printed is always "pytorch_train: ..."; with --json-out the same facts go to a file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

# cuBLAS is deterministic only with a fixed workspace configuration, which must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

CLASSES = 10
DATA_POOL = 16  # distinct batches, cycled; enough for the loss to mean something


class Net(nn.Module):
    """conv -> conv (stride 2) -> conv -> global mean -> linear -> linear."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, stride=2)
        self.conv3 = nn.Conv2d(2 * width, 2 * width, 3, padding=1)
        self.fc1 = nn.Linear(2 * width, 4 * width)
        self.fc2 = nn.Linear(4 * width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        # A plain mean, not AdaptiveAvgPool2d: its CUDA backward has no deterministic implementation.
        x = x.mean(dim=(2, 3))
        return self.fc2(F.relu(self.fc1(x)))


class SyntheticImages(torch.utils.data.Dataset):
    """Batch i is a pure function of (seed, i % DATA_POOL): the same in every run, with or without
    DataLoader workers. Labels are random; each class tints its images and adds its own stripes."""

    def __init__(self, seed: int, batches: int, batch_size: int, image_size: int,
                 delay_ms: float = 0.0) -> None:
        self.seed, self.batches, self.batch_size = seed, batches, batch_size
        self.image_size, self.delay_ms = image_size, delay_ms
        g = torch.Generator().manual_seed(seed + 7919)
        # Each class shifts the image by its own colour and adds its own stripes: learnable, not trivial.
        self.colours = torch.randn(CLASSES, 3, 1, 1, generator=g)
        self.stripes = torch.randn(CLASSES, 1, image_size, 1, generator=g)

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index % DATA_POOL)
        y = torch.randint(0, CLASSES, (self.batch_size,), generator=g)
        x = torch.randn(self.batch_size, 3, self.image_size, self.image_size, generator=g)
        x += 0.2 * self.colours[y] + 0.2 * self.stripes[y]
        if self.delay_ms:
            _spin(self.delay_ms / 1000.0)  # CPU work of a real input pipeline (decode, augment)
        return x, y


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of data and weights (default: 0)")
    p.add_argument("--json-out", type=Path, help="write losses, checksum and timings to this file")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--width", type=int, default=32, help="channels of the first conv (default: 32)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-amp", dest="amp", action="store_false", help="train in float32")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                   help="let cuDNN pick the fastest algorithms (results may vary from run to run)")
    p.add_argument("--time", action="store_true", help="synchronise after every step and time it")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="feed batches through a DataLoader with this many worker processes")
    p.add_argument("--data-delay-ms", type=float, default=0.0,
                   help="CPU time spent producing each batch (default: 0)")
    p.add_argument("--idle-tail-s", type=float, default=0.0,
                   help="after training, keep the process alive this long without GPU work")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def configure_determinism(deterministic: bool) -> None:
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    # warn_only: an op without a deterministic kernel in some PyTorch version warns (and a comparison
    # of two runs then shows it) instead of stopping the example.
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    # No TF32: the float32 parts compute in full precision, the same way on every run.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def batches(args: argparse.Namespace, device: torch.device):
    """Yield (x, y) on `device` for every step, from an in-memory pool or from a DataLoader."""
    data = SyntheticImages(args.seed, args.steps, args.batch_size, args.image_size, args.data_delay_ms)
    if args.loader_workers > 0:
        loader = torch.utils.data.DataLoader(
            data, batch_size=None, shuffle=False, num_workers=args.loader_workers,
            pin_memory=device.type == "cuda", persistent_workers=False, prefetch_factor=4)
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return
    pool = [data[i] for i in range(min(DATA_POOL, args.steps))]
    for step in range(args.steps):
        x, y = pool[step % len(pool)]
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def parameter_checksum(model: nn.Module) -> tuple[str, float]:
    """sha256 over the exact bytes of every parameter (bit-exact), and their float64 sum (readable)."""
    digest = hashlib.sha256()
    total = 0.0
    for name, p in sorted(model.named_parameters()):
        t = p.detach().to("cpu", torch.float32).contiguous()
        digest.update(name.encode())
        digest.update(t.numpy().tobytes())
        total += float(t.double().sum())
    return digest.hexdigest(), total


def memory_view(device: torch.device) -> dict[str, int] | None:
    """What the program is told about GPU memory (under libnvshare.so: the virtual view), and
    whether PyTorch's caching allocator maps its segments itself (expandable_segments:True, through
    cuMemCreate/cuMemMap) rather than taking them from cudaMalloc."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info()
    backend = torch.cuda.get_allocator_backend()  # "native" (the caching allocator) or "cudaMallocAsync"
    segments = torch.cuda.memory_snapshot() if backend == "native" else []  # the caching allocator's
    return {"free": free, "total": total, "allocator_backend": backend,
            "expandable_segments": sum(bool(seg.get("is_expandable")) for seg in segments)}


def train(args: argparse.Namespace) -> dict:
    device = pick_device(args.device)
    configure_determinism(args.deterministic)
    torch.manual_seed(args.seed)
    model = Net(args.width).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    losses: list[torch.Tensor] = []
    step_times: list[float] = []
    marks: dict[str, float] = {}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t_prev = time.perf_counter()
    for step, (x, y) in enumerate(batches(args, device)):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if args.time:
            sync()
            now = time.perf_counter()
            step_times.append(now - t_prev)
            t_prev = now
        if step == 0:
            sync()
            # CLOCK_MONOTONIC is system-wide: a harness can line these up with its own observations.
            marks["first_step_done"] = time.monotonic()
    sync()
    marks["train_end"] = time.monotonic()
    loss_values = [float(v) for v in torch.stack(losses).float().cpu()]
    sha, total = parameter_checksum(model)
    result = {
        "device": device.type,
        "torch": torch.__version__,
        "steps": args.steps,
        "seed": args.seed,
        "amp": args.amp,
        "deterministic": args.deterministic,
        "losses": loss_values,
        "param_sha256": sha,
        "param_sum": total,
        "memory": memory_view(device),
        "step_times_s": step_times,
        "marks": marks,
        "pid": os.getpid(),
    }
    if args.idle_tail_s > 0:
        print(f"pytorch_train: idle for {args.idle_tail_s:g}s", file=sys.stderr, flush=True)
        time.sleep(args.idle_tail_s)
        marks["idle_end"] = time.monotonic()
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = train(args)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    losses = result["losses"]
    timing = ""
    if result["step_times_s"]:
        times = sorted(result["step_times_s"][len(losses) // 5:] or result["step_times_s"])
        timing = f" median_step={times[len(times) // 2] * 1000:.2f}ms"
    print(f"pytorch_train: OK device={result['device']} steps={result['steps']} "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f} params_sha256={result['param_sha256'][:16]}{timing}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
