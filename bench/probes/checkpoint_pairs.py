"""Probe: does the driver restore a checkpointed process with GPU pairs as the checkpoint worker
passes them (src/xpushare/scheduler/node/checkpoint_worker.py: CUcheckpointRestoreArgs.gpuPairs),
and what does the process see of its device afterwards (UUID, PCI bus id)?

On a machine of one GPU the only pair is the GPU onto itself (--to 0): that checks the structure's
layout and the driver's answer. On a machine of two GPUs of one chip type, --to 1 is a real move.
A small child (64 MiB of plain device memory, filled) is locked and checkpointed, restored with the
pair (and, if that is refused, restored without one, as the scheduler does), then checks its bytes
and reports what its driver says of ordinal 0.

GPU safety: the child is small; a restored child is never killed: it is asked to exit, and one
that does not answer is checkpointed again before it is ended.

    python3 bench/probes/checkpoint_pairs.py [--to INDEX] [--json F]
"""
from __future__ import annotations

import argparse
import ctypes as C
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
from xpushare.scheduler.node.checkpoint_worker import Driver, full_mapping, gpu_pairs, uuid_text  # noqa: E402

CHILD = r'''
import ctypes as C, sys
cu = C.CDLL("libcuda.so.1")
def ck(r, w):
    if r: print(f"ERR {w} {r}", flush=True); sys.exit(1)
def where():
    u = (C.c_ubyte * 16)(); ck(cu.cuDeviceGetUuid_v2(u, 0), "uuid")
    b = bytes(u).hex(); bus = C.create_string_buffer(64); ck(cu.cuDeviceGetPCIBusId(bus, 64, 0), "bus")
    return f"GPU-{b[:8]}-{b[8:12]}-{b[12:16]}-{b[16:20]}-{b[20:]} {bus.value.decode()}"
ck(cu.cuInit(0), "init"); ctx = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0), "ctx")
ck(cu.cuCtxSetCurrent(ctx), "current")
S = 64 << 20
p = C.c_uint64(); ck(cu.cuMemAlloc_v2(C.byref(p), C.c_size_t(S)), "alloc")
ck(cu.cuMemsetD32_v2(p, C.c_uint(0x5EED1234), C.c_size_t(S // 4)), "memset"); ck(cu.cuCtxSynchronize(), "sync")
def intact():
    b = (C.c_uint32 * (S // 4))(); ck(cu.cuMemcpyDtoH_v2(b, p, C.c_size_t(S)), "d2h")
    return all(x == 0x5EED1234 for x in b[:: 4096]) and b[-1] == 0x5EED1234
print("READY", where(), flush=True)
for line in sys.stdin:
    if line.startswith("check"): print("CHECK", int(intact()), where(), flush=True)
    else: sys.exit(0)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--to", type=int, default=0, help="the GPU index to restore onto (0: the same)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    drv = Driver("libcuda.so.1")
    gpus = drv.node_gpus()
    if not 0 <= args.to < len(gpus):
        raise SystemExit(f"no GPU {args.to}: the driver lists {len(gpus)}")
    src, dst = uuid_text(gpus[0]), uuid_text(gpus[args.to])
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    out = {"from": src, "to": dst, "ready": child.stdout.readline().split(),
           "mapping": [[uuid_text(o), uuid_text(n)]  # what the worker hands the driver: every GPU
                       for o, n in full_mapping(gpu_pairs([[src, dst]]), gpus)]}
    restored = False
    try:
        out["suspend"] = drv.suspend(child.pid, 10000)
        if out["suspend"]["ok"]:
            out["restore_with_pair"] = drv.resume(child.pid, gpu_pairs([[src, dst]]))
            restored = out["restore_with_pair"]["ok"]
            if not restored:
                out["restore_plain"] = drv.resume(child.pid)
                restored = out["restore_plain"]["ok"]
        child.stdin.write("check\n")
        child.stdin.flush()
        out["after"] = child.stdout.readline().split()
        child.stdin.write("exit\n")
        child.stdin.flush()
        out["exit"] = child.wait(30)
    except subprocess.TimeoutExpired:
        out["stuck"] = True
        if restored:  # never kill a restored process: checkpoint it again first
            out["checkpointed_again"] = drv.suspend(child.pid, 10000)
        child.kill()
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
