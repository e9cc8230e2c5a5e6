#!/usr/bin/env python3
"""Would CUPTI's kernel records give a host-bound stream of tiny kernels its GPU time? Natively
(no library), through PyTorch's profiler (which records kernels with CUPTI's activity API): for
each kernel kind of bench/observability/busy_workload.py, the mean kernel duration CUPTI reports in a host-bound
loop, against the queued per-kernel time bench/observability/busy_accuracy.py judges by; and what recording
costs a launch (the loop's time per launch with and without the profiler). Issue 21's remaining
case: the event spans charge such a stream its launch gaps, and an event pair around one kernel
measures its launch latency (bench/probes/busy_pair.py). With --pair, one process runs a pattern
of busy_workload.py alone, then two run it together, for --seconds, each recording its kernels with
CUPTI: does a kernel's recorded duration leave out the time the GPU gave the other context (its
mean duration alone and together), and do two together run as many kernels a second as one alone
(counted over the time both ran)?
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
from bench.core.stats import common_window  # noqa: E402
from bench.observability.busy_workload import PATTERNS, kernels, queued_ms  # noqa: E402
from testkit.gpu import native_env  # noqa: E402


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
    """Run one pattern from start_at for seconds, recording kernels with CUPTI; the profiler is
    started and warm before start_at, so that its start-up falls outside the measured time.
    Samples (time, kernels launched and finished) after every synchronise."""
    kind, per_burst, sleep_s = PATTERNS[pattern]
    step = kernels(torch)[kind]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
        time.sleep(max(0.0, start_at - time.time()))
        launched, t0 = 0, time.time()
        samples = [(t0, 0)]
        while time.time() - t0 < seconds:
            for _ in range(per_burst):
                step()
            launched += per_burst
            torch.cuda.synchronize()
            samples.append((time.time(), launched))
            if sleep_s:
                time.sleep(sleep_s)
    total_us, count = kernel_time(prof.key_averages())
    return {"pattern": pattern, "launched": launched, "kernels_seen": count, "cupti_s": total_us / 1e6,
            "cupti_ms_per_kernel": total_us / 1e3 / count if count else None, "samples": samples}


def run_together(n: int, pattern: str, seconds: float) -> list[dict]:
    start_at = time.time() + 8.0  # every process has made its vectors and started its profiler
    cmd = [sys.executable, __file__, "--child", pattern, "--seconds", str(seconds),
           "--start-at", str(start_at)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=native_env()) for _ in range(n)]
    try:
        return [json.loads(p.communicate(timeout=seconds + 60)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def pair(pattern: str, seconds: float) -> dict:
    """One process alone, then two together: kernels a second over the time both ran, and the
    mean CUPTI duration of a kernel, against the queued time measured here first, alone."""
    step = kernels(torch)[PATTERNS[pattern][0]]
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    queued = statistics.median(queued_ms(torch, step) for _ in range(3))
    alone = run_together(1, pattern, seconds)[0]
    both = run_together(2, pattern, seconds)
    alone_s, (alone_n,) = common_window([alone["samples"]])
    together_s, counts = common_window([r["samples"] for r in both])
    rate_alone = alone_n / alone_s
    return {"queued_ms": queued, "alone_kernels_per_s": rate_alone, "together_s": together_s,
            "together_kernels_per_s": [c / together_s for c in counts] if together_s else None,
            "pair_over_alone": sum(counts) / together_s / rate_alone if together_s else None,
            "cupti_ms_per_kernel": {"alone": alone["cupti_ms_per_kernel"],
                                    "together": [r["cupti_ms_per_kernel"] for r in both]},
            "clients": [{k: v for k, v in r.items() if k != "samples"} for r in both]}


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
