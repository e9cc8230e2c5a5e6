"""Probe: does the driver's process checkpoint suspend a process whose memory is VMM (the library's
converted allocations now), give all of its GPU memory back, and restore it intact?

Cases, each a small child process (< 1 GiB) driven over stdin/stdout:
  raw-mapped     the driver alone (ctypes): 512 MiB reserved, created, mapped, filled; checkpointed
                 while mapped
  raw-unmapped   the same, but the child copies its bytes to host memory and unmaps and releases
                 them first (as a swap-out does), keeping the address reserved; after the restore it
                 maps new memory at the same address and copies back: does a reservation survive?
  torch          PyTorch under libnvshare.so (no scheduler: ungated), a 256 MiB tensor, idle
  torch-bare     PyTorch under libnvshare.so with a bare context (torch.ones(1).cuda()), idle
For each: lock, checkpoint, restore, unlock times; the GPU memory the child held before and while
checkpointed (nvidia-smi's per-process list and the device's used memory); whether its data came
back bit for bit. Reference: the cold start of a fresh `python -c "import torch; torch.ones(1).cuda()"`.

GPU safety: every child is small; a restored child is never killed: it is asked to exit, and one
that does not is checkpointed again before anything else happens to it.

    python3 bench/probes/checkpoint_vmm.py [--json F]
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

RAW_CHILD = r'''
import ctypes as C, sys, time
cu = C.CDLL("libcuda.so.1")
u64, sz = C.c_uint64, C.c_size_t
def ck(r, w):
    if r: print(f"ERR {w} {r}", flush=True); sys.exit(1)
class Loc(C.Structure): _fields_ = [("type", C.c_int), ("id", C.c_int)]
class Prop(C.Structure): _fields_ = [("type", C.c_int), ("htypes", C.c_int), ("loc", Loc), ("win", C.c_void_p), ("flags", C.c_ubyte * 8)]
class Acc(C.Structure): _fields_ = [("loc", Loc), ("flags", C.c_int)]
t0 = time.perf_counter()
ck(cu.cuInit(0), "init"); ctx = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0), "ctx"); ck(cu.cuCtxSetCurrent(ctx), "cur")
S = 512 << 20
prop = Prop(1, 0, Loc(1, 0))
va = u64(); ck(cu.cuMemAddressReserve(C.byref(va), sz(S), sz(2 << 20), u64(0), C.c_ulonglong(0)), "reserve")
def mapnew():
    h = u64(); ck(cu.cuMemCreate(C.byref(h), sz(S), C.byref(prop), C.c_ulonglong(0)), "create")
    ck(cu.cuMemMap(va, sz(S), sz(0), h, C.c_ulonglong(0)), "map")
    ck(cu.cuMemSetAccess(va, sz(S), C.byref(Acc(Loc(1, 0), 3)), sz(1)), "access")
    return h
h = mapnew()
ck(cu.cuMemsetD32_v2(va, C.c_uint(0x5EED1234), sz(S // 4)), "memset")
host = C.create_string_buffer(S)
def sample():
    b = C.create_string_buffer(1 << 20); ck(cu.cuMemcpyDtoH_v2(b, va, sz(1 << 20)), "d2h"); return b.raw[:16].hex()
first = sample()
print(f"READY {(time.perf_counter() - t0) * 1e3:.1f}", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "unmap":
        ck(cu.cuMemcpyDtoH_v2(host, va, sz(S)), "out"); ck(cu.cuCtxSynchronize(), "sync")
        ck(cu.cuMemUnmap(va, sz(S)), "unmap"); ck(cu.cuMemRelease(h), "release"); print("OK", flush=True)
    elif cmd == "remap":
        h = mapnew(); ck(cu.cuMemcpyHtoD_v2(va, host, sz(S)), "in"); print("OK", flush=True)
    elif cmd == "check":
        print(f"CHECK {int(sample() == first)}", flush=True)
    elif cmd == "quit":
        break
'''

TORCH_CHILD = r'''
import sys, time, hashlib
t0 = time.perf_counter()
import torch
bare = sys.argv[1] == "bare"
x = torch.ones(1, device="cuda") if bare else torch.arange(64 << 20, dtype=torch.float32, device="cuda").mul_(1.000001)
def digest(): return hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()[:16]
first = digest()
torch.cuda.synchronize()
print(f"READY {(time.perf_counter() - t0) * 1e3:.1f}", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "check":
        y = x * 2; torch.cuda.synchronize()
        print(f"CHECK {int(digest() == first)}", flush=True)
    elif cmd == "quit":
        break
'''

cu = C.CDLL("libcuda.so.1")


class LockArgs(C.Structure):
    _fields_ = [("timeoutMs", C.c_uint), ("reserved0", C.c_uint), ("reserved1", C.c_uint64 * 7)]


class Args8(C.Structure):
    _fields_ = [("reserved", C.c_uint64 * 8)]


class RestoreArgs(C.Structure):
    _fields_ = [("gpuPairs", C.c_void_p), ("gpuPairsCount", C.c_uint), ("reserved", C.c_char * 44),
                ("reserved1", C.c_uint64)]


def timed(fn, *a) -> tuple[int, float]:
    t = time.perf_counter()
    r = fn(*a)
    return r, (time.perf_counter() - t) * 1e3


def gpu_used_mib() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True).stdout.strip()
    return int(out.splitlines()[0]) if out else -1


def apps() -> dict[int, int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    found = {}
    for ln in out.splitlines():
        parts = [p.strip() for p in ln.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            found[int(parts[0])] = int(parts[1])
    return found


class Child:
    def __init__(self, argv, env):
        # its stderr (the library's debug lines) goes to ours
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        words = self.p.stdout.readline().split()
        if not words or words[0] != "READY":
            raise RuntimeError(f"child did not start: {words}")
        self.start_ms = float(words[1])

    def ask(self, cmd: str) -> list[str]:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().split()

    def quit(self) -> int | None:
        """Ask it to exit; a child that does not is checkpointed again, never killed while restored."""
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            return self.p.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            cu.cuCheckpointProcessLock(self.p.pid, C.byref(LockArgs(10000)))
            cu.cuCheckpointProcessCheckpoint(self.p.pid, C.byref(Args8()))
            return None


def one_case(name: str, argv, env, unmap: bool) -> dict:
    row: dict = {"case": name}
    used0 = gpu_used_mib()
    child = Child(argv, env)
    pid = child.p.pid
    row["child_start_ms"] = child.start_ms
    try:
        time.sleep(0.5)
        row["used_mib_running"], row["apps_running"] = gpu_used_mib(), apps().get(pid)
        if unmap:
            row["unmap"] = child.ask("unmap")
        r, row["lock_ms"] = timed(cu.cuCheckpointProcessLock, pid, C.byref(LockArgs(20000)))
        row["lock_ret"] = r
        if r == 0:
            r, row["checkpoint_ms"] = timed(cu.cuCheckpointProcessCheckpoint, pid, C.byref(Args8()))
            row["checkpoint_ret"] = r
            time.sleep(0.3)
            row["used_mib_checkpointed"], row["apps_checkpointed"] = gpu_used_mib(), apps().get(pid)
            if r == 0:
                r, row["restore_ms"] = timed(cu.cuCheckpointProcessRestore, pid, C.byref(RestoreArgs()))
                row["restore_ret"] = r
            r, row["unlock_ms"] = timed(cu.cuCheckpointProcessUnlock, pid, C.byref(Args8()))
            row["unlock_ret"] = r
        if unmap:
            row["remap"] = child.ask("remap")
        row["check"] = child.ask("check")
    finally:
        row["exit"] = child.quit()
    row["used_mib_before"] = used0
    return row


def cold_start_ms(py: str) -> list[float]:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([py, "-c", "import torch; torch.ones(1).cuda(); torch.cuda.synchronize()"], check=True)
        times.append((time.perf_counter() - t) * 1e3)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--lib", default=os.environ.get("NVSHARE_LIBRARY", ""))
    args = ap.parse_args()
    if cu.cuInit(0) != 0:
        sys.exit("cuInit failed")
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHARE_") and k != "LD_PRELOAD"}
    lib_env = dict(env, LD_PRELOAD=args.lib, NVSHARE_SOCK_PATH="/nonexistent/none.sock", NVSHARE_DEBUG="1",
                   PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False")
    results = {"cold_start_ms": cold_start_ms(py), "cases": []}
    cases = [("raw-mapped", [py, "-c", RAW_CHILD], env, False),
             ("raw-unmapped", [py, "-c", RAW_CHILD], env, True)]
    if args.lib:
        cases += [("torch", [py, "-c", TORCH_CHILD, "data"], lib_env, False),
                  ("torch-bare", [py, "-c", TORCH_CHILD, "bare"], lib_env, False)]
    for name, argv, e, unmap in cases:
        try:
            row = one_case(name, argv, e, unmap)
        except Exception as exc:  # noqa: BLE001 - a probe reports what failed and goes on
            row = {"case": name, "error": repr(exc)}
        print(json.dumps(row), flush=True)
        results["cases"].append(row)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
