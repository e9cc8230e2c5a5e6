#!/usr/bin/env python3
"""Does the scheduler's sharing out of busy spans give each of two clients running together its own
GPU time, when the spans are measured exactly? Natively (no library), two processes run the same
bench/observability/busy_workload.py pattern at once; each records, per burst, its host interval (first launch
to the synchronise's return, CLOCK_MONOTONIC) and the events' span around it (what the library's
spans measure). Then, against the reference (kernels x the queued per-kernel time, measured
alone): the spans as they are, and what the scheduler's rule (gpu_busy.span_share) keeps of them.
What is left off 1.0 is the GPU's, not the library's measurement. Prints JSON (with the raw spans).
GPU safety: 768 MiB per process.

    python3 bench/probes/overlap_split.py [--seconds 3] [--patterns burst30,burst8,saturate,tiny]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
from bench.observability.busy_workload import PATTERNS, kernels, queued_ms, wait_for  # noqa: E402

from xpushare.scheduler.node.gpu_busy import span_share  # noqa: E402


def worker(pattern: str, seconds: float, go: str, out: str) -> None:
    import torch
    kind, per_burst, sleep_s = PATTERNS[pattern]
    step = kernels(torch)[kind]
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    open(out + ".warm", "w").close()
    wait_for(go)
    spans, t_end = [], time.monotonic() + seconds
    while time.monotonic() < t_end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.monotonic()
        a.record()
        for _ in range(per_burst):
            step()
        b.record()
        torch.cuda.synchronize()
        t1 = time.monotonic()
        spans.append((t0, t1, a.elapsed_time(b) / 1e3, per_burst))
        if sleep_s:
            time.sleep(sleep_s)
    with open(out, "w") as fh:
        json.dump({"spans": spans}, fh)


def shared(mine, others):
    """What the scheduler keeps of my spans beside the others' (gpu_busy.span_share)."""
    spans = [(s, e, min(g, e - s)) for s, e, g, _ in mine]
    return sum(g for _, _, g in spans) * span_share(spans, [(s, e, min(g, e - s))
                                                            for s, e, g, _ in others])


def reference() -> dict:
    """The queued per-kernel time of each kind, measured alone, seconds."""
    import torch
    steps = kernels(torch)
    for step in steps.values():
        for _ in range(50):
            step()
    torch.cuda.synchronize()
    return {kind: sorted(queued_ms(torch, step) for _ in range(5))[2] / 1e3
            for kind, step in steps.items()}


def pair(pattern: str, seconds: float, ref_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        outs = [os.path.join(tmp, f"w{i}.json") for i in range(2)]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", pattern, "--seconds",
                                   str(seconds), "--go", go, "--out", o]) for o in outs]
        for o in outs:
            wait_for(o + ".warm")
        open(go, "w").close()
        for p in procs:
            p.wait()
        res = [json.load(open(o)) for o in outs]
    rows = []
    for i, r in enumerate(res):
        other = res[1 - i]["spans"]
        true = sum(n for *_, n in r["spans"]) * ref_s
        rows.append({"true_s": true, "spans_ratio": sum(s[2] for s in r["spans"]) / true,
                     "shared_ratio": shared(r["spans"], other) / true,
                     "raw": r["spans"],
                     "host_ratio": sum(s[1] - s[0] for s in r["spans"]) / true,
                     "bursts": len(r["spans"])})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--go")
    p.add_argument("--out")
    p.add_argument("--patterns", default="burst30,burst8,saturate,tiny")
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.seconds, a.go, a.out)
    if a.reference:
        return print(json.dumps(reference()))
    ref = json.loads(subprocess.check_output([sys.executable, __file__, "--reference"]))
    out = {"reference_s": ref}
    for pat in a.patterns.split(","):
        out[pat] = pair(pat, a.seconds, ref[PATTERNS[pat][0]])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
