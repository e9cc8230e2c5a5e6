#!/usr/bin/env python3
"""What an event pair around one kernel says of its GPU time, natively, against the queued
per-kernel time bench/observability/busy_workload.py uses as the reference: for a kernel launched onto an idle
GPU (a host-bound stream), one in a queue, and one sampled every k-th launch of a host-bound loop.
Prints JSON. GPU safety: three 256 MiB vectors."""
import json
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
import torch  # noqa: E402
from bench.observability.busy_workload import kernels, queued_ms  # noqa: E402


def paired(step, n=3000, gap_s=20e-6, every=1):
    out = []
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    k = 0
    for i in range(n * every):
        if i % every == 0:
            a, b = ev[k]
            a.record()
            step()
            b.record()
            k += 1
        else:
            step()
        t = time.perf_counter() + gap_s
        while time.perf_counter() < t:
            pass
    torch.cuda.synchronize()
    out = [a.elapsed_time(b) for a, b in ev]
    return {"median_ms": statistics.median(out), "mean_ms": statistics.fmean(out),
            "p10": sorted(out)[len(out) // 10], "p90": sorted(out)[9 * len(out) // 10]}


steps = kernels(torch)
for s in steps.values():
    for _ in range(50):
        s()
torch.cuda.synchronize()
res = {}
for kind, step in steps.items():
    res[kind] = {"queued_ms": statistics.median(queued_ms(torch, step) for _ in range(5)),
                 "idle_pair": paired(step, n=2000 if kind == "tiny" else 300),
                 "idle_pair_every8": paired(step, n=500 if kind == "tiny" else 100, every=8)}
print(json.dumps(res, indent=1))
