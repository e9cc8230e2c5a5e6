"""The driver's process checkpoint, in a process of its own: the scheduler's hands on suspended
clients (suspend.py starts it as `python -m xpushare.scheduler.node.checkpoint_worker DRIVER`).

Why a process of its own: the checkpoint calls block (a lock waits for the target's driver calls,
a checkpoint copies what the target still has on the GPU), a driver fault must not stop the
scheduler's loop, and the scheduler itself loads no CUDA driver. It needs what the driver asks of
a checkpoint controller: the target's user or CAP_SYS_PTRACE, and the target's PID namespace.

One JSON request per line on stdin, one answer per line on stdout; the first line written is
{"ready": true} or {"ready": false, "why": ...}:
  {"op": "suspend", "pid": N, "timeout_ms": T}  lock, then checkpoint (a failed checkpoint is
                                                 unlocked again: the process runs on)
  {"op": "resume", "pid": N}                     restore if checkpointed, unlock if locked
  {"op": "resume", "pid": N, "pairs": [[OLD, NEW], ...]}
                                                 restore onto other GPUs (driver 580+), then unlock:
                                                 each OLD GPU's work onto NEW, both GPU UUIDs as
                                                 NVML writes them ("GPU-" and 8-4-4-4-12 hex digits);
                                                 only a checkpointed process can move. The driver
                                                 takes a mapping of every GPU it has, whatever the
                                                 process sees (full_mapping): the worker completes it
Answers: {"ok": bool, "ms": {phase: ms}, "error": text or null, "retry": whether trying again
later may work (a restore that found no room)}, and "moved": true once a restore with pairs
succeeded. A refused move leaves the process checkpointed: a resume without pairs brings it back
where it was. After a move the process's device ordinals name the new GPUs, but the driver still
answers cuDeviceGetPCIBusId with the old GPU's bus id (NVIDIA/cuda-checkpoint issue 48).
"""

from __future__ import annotations

import ctypes as C
import json
import re
import sys
import time

RUNNING, LOCKED, CHECKPOINTED, FAILED = 0, 1, 2, 3  # CUprocessState
STATES = {RUNNING: "running", LOCKED: "locked", CHECKPOINTED: "checkpointed", FAILED: "failed"}
OUT_OF_MEMORY = 2
MOVE_VERSION = 13000  # cuDriverGetVersion of the first driver whose restore takes GPU pairs (r580)
GPU_UUID = re.compile(r"GPU-([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})", re.I)


class LockArgs(C.Structure):
    _fields_ = [("timeoutMs", C.c_uint), ("reserved0", C.c_uint), ("reserved1", C.c_uint64 * 7)]


class Args(C.Structure):  # CUcheckpointCheckpointArgs, CUcheckpointUnlockArgs
    _fields_ = [("reserved", C.c_uint64 * 8)]


class GpuPair(C.Structure):  # CUcheckpointGpuPair
    _fields_ = [("oldUuid", C.c_ubyte * 16), ("newUuid", C.c_ubyte * 16)]


class RestoreArgs(C.Structure):  # no GPU pairs: back onto the GPUs it left
    _fields_ = [("gpuPairs", C.POINTER(GpuPair)), ("gpuPairsCount", C.c_uint), ("reserved", C.c_char * 44),
                ("reserved1", C.c_uint64)]


def uuid_bytes(text) -> bytes:
    m = GPU_UUID.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not a GPU UUID: {text!r}")
    return bytes.fromhex("".join(m.groups()))


def gpu_pairs(pairs) -> list[tuple[bytes, bytes]]:
    """The request's [[old, new], ...] as UUID bytes; ValueError for anything else."""
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError("pairs: a list of [old GPU UUID, new GPU UUID]")
    return [(uuid_bytes(old), uuid_bytes(new)) for old, new in pairs]


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def full_mapping(pairs: list[tuple[bytes, bytes]], node: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The restore's GPU pairs as the driver takes them: every GPU of the node (all the kernel
    driver has: CUDA_VISIBLE_DEVICES does not narrow it, and a mapping of fewer is refused as an
    invalid value), each once as old and once as new. The moves asked for; every other GPU onto
    itself where nothing moves onto it; the rest, the GPUs moved onto, paired with those moved from
    in node order: moving 0 -> 1 on four GPUs is 0 -> 1, 1 -> 0, 2 -> 2, 3 -> 3 (the process has
    nothing on 1, so nothing moves onto 0). ValueError for a GPU the node lacks or named twice."""
    if not node:
        raise ValueError("the driver lists no GPU")
    mapping: dict[bytes, bytes] = {}
    for old, new in pairs:
        for gpu in (old, new):
            if gpu not in node:
                raise ValueError(f"{uuid_text(gpu)} is not a GPU of this node")
        if old in mapping or new in mapping.values():
            raise ValueError("a GPU named twice in the pairs")
        mapping[old] = new
    sources = [g for g in node if g not in mapping]
    targets = [g for g in node if g not in mapping.values()]
    for gpu in [g for g in sources if g in targets]:
        mapping[gpu] = gpu
        sources.remove(gpu)
        targets.remove(gpu)
    mapping.update(zip(sources, targets))
    return [(old, mapping[old]) for old in node]


def restore_args(pairs: list[tuple[bytes, bytes]]) -> RestoreArgs:
    args = RestoreArgs()
    if pairs:
        array = (GpuPair * len(pairs))(*(GpuPair((C.c_ubyte * 16)(*old), (C.c_ubyte * 16)(*new))
                                         for old, new in pairs))
        args.gpuPairs, args.gpuPairsCount = C.cast(array, C.POINTER(GpuPair)), len(pairs)
        args._array = array  # the driver reads it during the call: alive as long as the args
    return args


CALLS = ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
         "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState")


class Driver:
    def __init__(self, path: str):
        self.cu = C.CDLL(path)
        missing = [n for n in CALLS if not hasattr(self.cu, n)]
        if missing:
            raise OSError(f"the driver has no {missing[0]} (process checkpoints need driver 570+)")
        r = self.cu.cuInit(0)
        if r:
            raise OSError(f"cuInit failed: {self.name(r)}")
        version = C.c_int(0)
        self.version = version.value if self.cu.cuDriverGetVersion(C.byref(version)) == 0 else 0

    def name(self, r: int) -> str:
        text = C.c_char_p()
        if self.cu.cuGetErrorName(r, C.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return f"CUresult {r}"

    def node_gpus(self) -> list[bytes]:
        """The UUID of every GPU this driver has (the worker runs without CUDA_VISIBLE_DEVICES:
        suspend.py), in its order."""
        count, out = C.c_int(0), []
        if self.cu.cuDeviceGetCount(C.byref(count)):
            return out
        get_uuid = getattr(self.cu, "cuDeviceGetUuid_v2", None) or self.cu.cuDeviceGetUuid
        for ordinal in range(count.value):
            dev, raw = C.c_int(0), (C.c_ubyte * 16)()
            if self.cu.cuDeviceGet(C.byref(dev), ordinal) == 0 and get_uuid(raw, dev) == 0:
                out.append(bytes(raw))
        return out

    def state(self, pid: int) -> int | None:
        st = C.c_int(-1)
        return st.value if self.cu.cuCheckpointProcessGetState(pid, C.byref(st)) == 0 else None

    def timed(self, fn: str, pid: int, args) -> tuple[int, float]:
        t = time.perf_counter()
        r = getattr(self.cu, fn)(pid, C.byref(args))
        return r, round((time.perf_counter() - t) * 1e3, 3)

    def suspend(self, pid: int, timeout_ms: int) -> dict:
        ms: dict[str, float] = {}
        r, ms["lock"] = self.timed("cuCheckpointProcessLock", pid, LockArgs(timeout_ms))
        if r:
            return {"ok": False, "ms": ms, "error": f"lock: {self.name(r)}", "retry": False}
        r, ms["checkpoint"] = self.timed("cuCheckpointProcessCheckpoint", pid, Args())
        if r:
            u, ms["unlock"] = self.timed("cuCheckpointProcessUnlock", pid, Args())
            return {"ok": False, "ms": ms, "retry": False,
                    "error": f"checkpoint: {self.name(r)}" + ("" if u == 0 else f"; unlock: {self.name(u)}")}
        return {"ok": True, "ms": ms, "error": None, "retry": False}

    def resume(self, pid: int, pairs: list[tuple[bytes, bytes]] = ()) -> dict:
        ms: dict[str, float] = {}
        moved: dict[str, bool] = {}
        st = self.state(pid)
        if pairs and self.version < MOVE_VERSION:  # an older driver restores it where it was
            return {"ok": False, "ms": ms, "retry": False,
                    "error": f"the driver (CUDA {self.version // 1000}.{self.version % 1000 // 10}) cannot "
                             "restore onto another GPU: that needs driver 580 (CUDA 13.0) or newer"}
        if pairs and st != CHECKPOINTED:  # unlocking it would run it on where it is, unmoved
            return {"ok": False, "ms": ms, "retry": False,
                    "error": f"not checkpointed: cannot move (the process is {STATES.get(st, 'unknown')})"}
        if pairs:
            try:
                pairs = full_mapping(pairs, self.node_gpus())
            except ValueError as e:
                return {"ok": False, "ms": ms, "retry": False, "error": f"cannot move: {e}"}
        if st == CHECKPOINTED:
            r, ms["restore"] = self.timed("cuCheckpointProcessRestore", pid, restore_args(pairs))
            if r:
                return {"ok": False, "ms": ms, "error": f"restore: {self.name(r)}",
                        "retry": r == OUT_OF_MEMORY}
            moved = {"moved": True} if pairs else {}
            st = LOCKED
        if st == LOCKED:
            r, ms["unlock"] = self.timed("cuCheckpointProcessUnlock", pid, Args())
            if r:
                return {"ok": False, "ms": ms, "error": f"unlock: {self.name(r)}", "retry": True, **moved}
        return {"ok": True, "ms": ms, "error": None, "retry": False, **moved}


def serve(driver: Driver, lines, out) -> None:
    for line in lines:
        try:
            req = json.loads(line)
            pid = int(req["pid"])
            if req["op"] == "suspend":
                answer = driver.suspend(pid, int(req.get("timeout_ms", 10000)))
            elif req["op"] == "resume":
                answer = driver.resume(pid, gpu_pairs(req.get("pairs") or []))
            else:
                answer = {"ok": False, "error": f"unknown op {req['op']!r}", "retry": False}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"ok": False, "error": f"bad request: {e}", "retry": False}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def main() -> None:
    try:
        driver = Driver(sys.argv[1] if len(sys.argv) > 1 else "libcuda.so.1")
    except OSError as e:
        print(json.dumps({"ready": False, "why": str(e)}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    serve(driver, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
