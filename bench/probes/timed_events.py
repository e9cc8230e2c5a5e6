"""Probe: what a CUDA event costs an inference request while another process keeps the GPU busy.

No library: this process is an inference server (the transformer of
bench/scheduling/inference_worker.py, batch 1, one synchronize per request) and a child process
trains the MLP of the same file without pause, both on the driver's own time-slicing. Each request
records events around its forward pass, as the library's busy-time measurement does (an event before
the first launch after an idle point, one before the synchronisation), and then copies its answer
to the host, as a server does; the variants (steps after the forward pass's launches):
  none               synchronize (the reference of the first group)
  untimed-both       untimed events (CU_EVENT_DISABLE_TIMING) before and after the pass, synchronize
  timed-both         timing events before and after the pass, synchronize
  copy               synchronize, copy the answer to pageable memory (.cpu(), the reference of
                     the copy group)
  copy-ev-before     synchronize, a timing event, .cpu()  (the library's start event before a copy)
  copy-uev-before    the same with an untimed event
  pinned             synchronize, copy into pinned memory, synchronize the stream
  pinned-ev-after    synchronize, copy into pinned memory, a timing event, synchronize the stream
                     (the library's checkpoint before a stream synchronisation)
  pinned-uev-after   the same with an untimed event
and with no synchronize between the pass and the copy (the pattern of `y.cpu()` straight after a
forward pass), the copy to pageable memory made with cuMemcpyDtoHAsync (it returns once the copy is
done) and then a stream synchronisation:
  pageable           nothing else (the reference of this group)
  pageable-ev-after  a timing event between the copy and the synchronisation (the library's
                     checkpoint before a stream synchronisation, where a kernel opened the span)
  pageable-uev-after the same with an untimed event
  pageable-ev-before a timing event between the pass and the copy
The variants take turns in blocks of --block requests (arrivals at seeded exponential gaps of mean
--mean-ms), so that drift in the trainer's phase falls on all of them alike. Reported: p50/p99 of
the request latency (host: before the first launch to the return of its last step) and p50 over
its group's reference, and the same with no trainer (alone) when --alone is given.

    python3 bench/probes/timed_events.py [--requests 200] [--mean-ms 20] [--block 25] [--alone]
                                         [--json F]
"""
from __future__ import annotations

import argparse
import ctypes as C
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from bench.scheduling.inference_worker import (D_MODEL, HEADS, SEQ, TRAIN_BATCH,  # noqa: E402
                                               TRAIN_DEPTH, TRAIN_WIDTH)

VARIANTS = ("none", "untimed-both", "timed-both", "copy", "copy-ev-before", "copy-uev-before",
            "pinned", "pinned-ev-after", "pinned-uev-after",
            "pageable", "pageable-ev-after", "pageable-uev-after", "pageable-ev-before")


def reference(variant: str) -> str:
    return variant.split("-")[0] if variant.startswith(("copy", "pinned", "pageable")) else "none"

TRAINER = f"""
import os, sys, torch
layers = []
for _ in range({TRAIN_DEPTH}):
    layers += [torch.nn.Linear({TRAIN_WIDTH}, {TRAIN_WIDTH}), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn({TRAIN_BATCH}, {TRAIN_WIDTH}, device="cuda")
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    opt.step()
    torch.cuda.synchronize()
"""


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def serve(variants: list[str], requests: int, mean_ms: float, block: int,
          seed: int) -> dict[str, list[float]]:
    import torch
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=4 * D_MODEL,
                                             batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).half().cuda().eval()
    x = torch.randn(1, SEQ, D_MODEL, device="cuda").half()
    events = {timed: (torch.cuda.Event(enable_timing=timed), torch.cuda.Event(enable_timing=timed))
              for timed in (False, True)}

    pinned = torch.empty(1, SEQ, D_MODEL, dtype=torch.half, pin_memory=True)
    pageable = bytearray(SEQ * D_MODEL * 2)
    page_ptr = C.c_void_p(C.addressof(C.c_char.from_buffer(pageable)))
    cuda = C.CDLL("libcuda.so.1")
    cuda.cuMemcpyDtoHAsync_v2.argtypes = [C.c_void_p, C.c_uint64, C.c_size_t, C.c_void_p]

    def copy_pageable(y) -> None:
        stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
        r = cuda.cuMemcpyDtoHAsync_v2(page_ptr, y.data_ptr(), len(pageable), stream)
        assert r == 0, f"cuMemcpyDtoHAsync: {r}"

    def request(variant: str) -> float:
        timed = "-ev-" in variant or variant.startswith("timed")
        before, after = events[timed]
        around = variant.endswith("-both")
        t0 = time.monotonic()
        with torch.inference_mode():
            if around:
                before.record()
            y = model(x)
            if around:
                after.record()
        if variant.startswith("pageable"):
            if variant == "pageable-ev-before":
                before.record()
            copy_pageable(y)
            if variant.endswith("-after"):
                after.record()
            torch.cuda.current_stream().synchronize()
            return time.monotonic() - t0
        torch.cuda.synchronize()
        if variant.startswith("copy"):
            if variant != "copy":
                before.record()
            y.cpu()
        elif variant.startswith("pinned"):
            pinned.copy_(y, non_blocking=True)
            if variant != "pinned":
                after.record()
            torch.cuda.current_stream().synchronize()
        return time.monotonic() - t0

    for v in variants * 4:
        request(v)
    rng = random.Random(seed)
    out: dict[str, list[float]] = {v: [] for v in variants}
    while min(len(x) for x in out.values()) < requests:
        for v in variants:
            for _ in range(block):
                time.sleep(rng.expovariate(1000.0 / mean_ms))
                out[v].append(request(v))
    return out


def summary(lat: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {v: {"p50_ms": statistics.median(xs) * 1e3, "p99_ms": pct(xs, 0.99) * 1e3,
                "p50_over_ref": statistics.median(xs) / statistics.median(lat[reference(v)]),
                "p99_over_ref": pct(xs, 0.99) / pct(lat[reference(v)], 0.99), "n": len(xs)}
            for v, xs in lat.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--mean-ms", type=float, default=20.0)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alone", action="store_true", help="also measure with no trainer first")
    ap.add_argument("--variants", type=lambda t: t.split(","), default=list(VARIANTS),
                    help=f"a comma list of them (default all: {','.join(VARIANTS)}); each group's "
                         "reference is added")
    ap.add_argument("--json")
    a = ap.parse_args()
    unknown = set(a.variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(sorted(unknown))}; known: {', '.join(VARIANTS)}")
    variants = [v for v in VARIANTS if v in a.variants or v in {reference(x) for x in a.variants}]
    result: dict[str, dict] = {}
    if a.alone:
        result["alone"] = summary(serve(variants, a.requests // 2, a.mean_ms, a.block, a.seed))
    stop = f"/tmp/timed-events-stop-{os.getpid()}"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, stop], stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout.readline().strip() == "ready", "the trainer did not start"
        result["beside_training"] = summary(serve(variants, a.requests, a.mean_ms, a.block, a.seed))
    finally:
        open(stop, "w").close()
        trainer.wait(timeout=60)
        os.unlink(stop)
    for phase, rows in result.items():
        print(phase)
        for v, r in rows.items():
            print(f"  {v:17s} p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  over "
                  f"{reference(v)}: p50 {r['p50_over_ref']:.2f} p99 {r['p99_over_ref']:.2f}  (n={r['n']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
