#!/usr/bin/env python3
"""Two saturating processes running together: do they get the GPU's whole time, natively and under
the library? Two clients of back-to-back adds under the library ran 90% of the adds one runs
alone; this tells whether the missing time is the GPU switching between two contexts (no client's
busy time can leave it out) or comes from managed memory, timing events or the library. Answer
(docs/benchmarks.md, "What two contexts running together lose"): the GPU's; the native pair on
device memory loses as much.

Arms, each alone and then two processes at once, for --seconds:
  native-device    CuPy's pool on cudaMalloc, no library
  native-managed   CuPy's pool on cudaMallocManaged, no library
  native-events    as native-device, with timing events recorded at ops 0, 64, 128 and 192 of
                   every 200 and the time between consecutive ones read once they completed: like
                   the library's checkpoints, though sparser (those come about every 32 adds)
  library          CuPy's pool on cudaMalloc under libnvshare.so (converted to managed memory), a
                   scheduler in mode auto (both fit, both hold the GPU)
  library-untimed  the same with NVSHARE_DRAIN_TARGET_MS=0: checkpoints without timing events,
                   every 128 launches (the timed ones adapt their interval)
The workload (--op): `add`, adds of two 256 MiB float32 vectors (memory-bound; 0.32 ms each on an
H200 in CuPy), or `matmul`, products of two 4096 x 4096 float16 matrices (compute-bound); a
synchronise every 200. Per arm: ops per second alone (the keys say "adds" whatever the op), the
pair's over the time both ran (each samples its count after every synchronise), and their ratio
(1.0: the pair loses nothing to running together); `late` flags a process that was not ready at
the common start. Prints JSON. GPU safety: 768 MiB per process, two at a time; the library's
processes get a virtual capacity.

    python3 bench/probes/pair_throughput.py [--seconds 3] [--op add|matmul] [--arms native-device,library]
"""
import argparse
import json
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
from bench.core.stats import common_window  # noqa: E402

ARMS = ("native-device", "native-managed", "native-events", "library", "library-untimed")
EVENTS_EVERY = 64
ELEMENTS = 64 << 20   # float32: 256 MiB per vector
SIDE = 4096           # float16: 32 MiB per matrix
PER_SYNC = 200


def operands(cupy, op: str):
    if op == "matmul":
        a = cupy.ones((SIDE, SIDE), dtype=cupy.float16)
        return a, a.copy(), cupy.empty((SIDE, SIDE), dtype=cupy.float16), cupy.matmul
    a = cupy.ones(ELEMENTS, dtype=cupy.float32)
    return a, a.copy(), cupy.empty(ELEMENTS, dtype=cupy.float32), cupy.add


def child(op: str, managed: bool, events: bool, seconds: float, start_at: float) -> dict:
    import cupy

    if managed:
        cupy.cuda.set_allocator(cupy.cuda.MemoryPool(cupy.cuda.malloc_managed).malloc)
    a, b, c, kernel = operands(cupy, op)
    for _ in range(50):
        kernel(a, b, out=c)
    cupy.cuda.Device().synchronize()
    late = time.time() > start_at  # not ready in time: it started after the others
    time.sleep(max(0.0, start_at - time.time()))
    adds, t0 = 0, time.time()
    samples = [(t0, 0)]
    timed = []  # [event, ...] recorded and not yet read
    while time.time() - t0 < seconds:
        for i in range(PER_SYNC):
            kernel(a, b, out=c)
            if events and i % EVENTS_EVERY == 0:
                timed.append(cupy.cuda.Event())
                timed[-1].record()
                while len(timed) > 1 and timed[1].done:  # as the checkpoints retire
                    cupy.cuda.get_elapsed_time(timed[0], timed[1])
                    timed.pop(0)
        cupy.cuda.Device().synchronize()
        adds += PER_SYNC
        samples.append((time.time(), adds))
    return {"adds": adds, "late": late, "samples": samples}


def together(n: int, name: str, op: str, seconds: float, env: dict) -> list[dict]:
    start_at = time.time() + 10.0  # every process has made its vectors and warmed up by then
    cmd = [sys.executable, __file__, "--child", "--op", op, "--seconds", str(seconds),
           "--start-at", str(start_at)]
    cmd += ["--managed"] if name == "native-managed" else []
    cmd += ["--events"] if name == "native-events" else []
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    try:
        return [json.loads(p.communicate(timeout=seconds + 120)[0]) for p in procs]
    finally:  # one that failed must not leave the others holding their GPU memory
        for p in procs:
            if p.poll() is None:
                p.kill()


def arm(name: str, op: str, seconds: float, env: dict) -> dict:
    """Adds a second alone, and of the two together over the time both ran (common_window)."""
    alone = together(1, name, op, seconds, env)[0]
    pair = together(2, name, op, seconds, env)
    alone_s, (alone_n,) = common_window([alone["samples"]])
    both_s, counts = common_window([r["samples"] for r in pair])
    rate = alone_n / alone_s
    return {"alone_adds_per_s": rate, "together_s": both_s,
            "pair_adds_per_s": [n / both_s for n in counts] if both_s else None,
            "pair_over_alone": sum(counts) / both_s / rate if both_s else None,
            "late": [r["late"] for r in (alone, *pair)]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--op", default="add", choices=("add", "matmul"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--managed", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--events", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.op, args.managed, args.events, args.seconds, args.start_at)))
        return
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {', '.join(unknown)}: the arms are {', '.join(ARMS)}")
    from bench.core.common import harness, require_safe_gpu

    require_safe_gpu()
    out = {"op": args.op}
    for name in arms:
        if not name.startswith("library"):
            out[name] = arm(name, args.op, args.seconds, harness.native_env())
            continue
        extra = {"NVSHARE_DRAIN_TARGET_MS": "0"} if name == "library-untimed" else {}
        with harness.Scheduler(mode="auto", tq=30) as sched:
            out[name] = arm(name, args.op, args.seconds,
                            harness.library_env(harness.library_path(), sched.socket, **extra))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
