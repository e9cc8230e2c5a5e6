#!/usr/bin/env python3
"""Would CUPTI's kernel records give a host-bound stream of tiny kernels its GPU time? Natively
(no library), through PyTorch's profiler (which records kernels with CUPTI's activity API): for
each kernel kind of bench/observability/busy_workload.py, the mean kernel duration CUPTI reports in a host-bound
loop, against the queued per-kernel time bench/observability/busy_accuracy.py judges by; and what recording
costs a launch (the loop's time per launch with and without the profiler). Issue 21's remaining
case: the event spans charge such a stream its launch gaps, and an event pair around one kernel
measures its launch latency (bench/probes/busy_pair.py). With --pair, two processes run one
pattern of busy_workload.py together for --seconds, each recording its kernels with CUPTI: does a
kernel's recorded duration leave out the time the GPU gave the other context (each process's CUPTI
time over its kernel count times the queued time, and the two together over the wall time)?
Prints JSON. GPU safety: three 256 MiB vectors per process.

    python3 bench/probes/cupti_kernels.py [--launches 20000] [--pair saturate,burst30 --seconds 3]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from bench.observability.busy_workload import PATTERNS, kernels, queued_ms  # noqa: E402


def per_launch_us(step, n: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def kernel_time(averages) -> tuple[float, int]:
    """Total device time (us) and count of the kernels in a profile's key averages."""
    total, count = 0.0, 0
    for row in averages:
        us = getattr(row, "self_device_time_total", None)
        if us is None:
            us = getattr(row, "self_cuda_time_total", 0.0)
        if us and row.count and "memcpy" not in row.key.lower() and "memset" not in row.key.lower():
            total += us
            count += row.count
    return total, count


def child(pattern: str, seconds: float, start_at: float) -> dict:
    """Run one pattern from start_at for seconds, recording kernels with CUPTI."""
    kind, per_burst, sleep_s = PATTERNS[pattern]
    step = kernels(torch)[kind]
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    queued = statistics.median(queued_ms(torch, step) for _ in range(3))
    time.sleep(max(0.0, start_at - time.time()))
    launched = 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(per_burst):
                step()
            launched += per_burst
            torch.cuda.synchronize()
            if sleep_s:
                time.sleep(sleep_s)
        wall = time.perf_counter() - t0
    total_us, count = kernel_time(prof.key_averages())
    return {"pattern": pattern, "queued_ms": queued, "launched": launched, "kernels_seen": count,
            "cupti_s": total_us / 1e6, "reference_s": launched * queued / 1e3, "wall_s": wall,
            "cupti_over_reference": total_us / 1e3 / (launched * queued) if launched else None}


def pair(pattern: str, seconds: float) -> dict:
    start_at = time.time() + 8.0  # both have made their vectors and measured their reference
    cmd = [sys.executable, __file__, "--child", pattern, "--seconds", str(seconds),
           "--start-at", str(start_at)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(p.communicate(timeout=seconds + 60)[0]) for p in procs]
    wall = max(r["wall_s"] for r in results)
    return {"clients": results, "cupti_sum_over_wall": sum(r["cupti_s"] for r in results) / wall,
            "reference_sum_over_wall": sum(r["reference_s"] for r in results) / wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--pair", help="comma-separated patterns, each run by two processes together")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seconds, args.start_at)))
        return
    if args.pair:
        print(json.dumps({pattern: pair(pattern, args.seconds) for pattern in args.pair.split(",")},
                         indent=1))
        return
    steps = kernels(torch)
    for step in steps.values():
        for _ in range(50):
            step()
    torch.cuda.synchronize()
    out = {}
    for kind, step in steps.items():
        n = args.launches if kind == "tiny" else args.launches // 20
        queued = statistics.median(queued_ms(torch, step) for _ in range(5))
        plain = [per_launch_us(step, n) for _ in range(3)]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            profiled = per_launch_us(step, n)
        total_us, count = kernel_time(prof.key_averages())
        mean_ms = total_us / count / 1e3 if count else None
        out[kind] = {"queued_ms": queued, "cupti_kernel_ms": mean_ms, "kernels_seen": count,
                     "launches": n, "cupti_over_queued": mean_ms / queued if mean_ms else None,
                     "loop_us_per_launch": statistics.median(plain),
                     "loop_us_per_launch_profiled": profiled}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
