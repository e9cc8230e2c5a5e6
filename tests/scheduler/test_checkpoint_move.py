"""Moving a checkpointed process to another GPU: the checkpoint worker's resume with "pairs"
(src/xpushare/scheduler/node/checkpoint_worker.py) against the mock driver (tests/mock/cuda/:
checkpoint.c and move.c; its README.md, "Moving between GPUs"). The real worker process drives
cuCheckpointProcess* at a real target process, which loads the same mock with the same
MOCK_CUDA_CHECKPOINT_DIR and, at each line the test writes to it, prints what its device ordinals
are: after a move, the new GPU's UUID and name, but the old GPU's PCI bus id (the real driver's,
NVIDIA/cuda-checkpoint issue 48)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.interposer.harness import build_mock_variant

INVALID_VALUE, NOT_SUPPORTED = 1, 801
CHECKPOINTED, LOCKED = 2, 1

# The target: its devices as JSON, once at the start and again for every line it reads.
TARGET = r"""
import ctypes as C, json, sys
cu = C.CDLL(sys.argv[1])
assert cu.cuInit(0) == 0
count = C.c_int()
assert cu.cuDeviceGetCount(C.byref(count)) == 0

def device(k):
    uuid, name, bus = (C.c_ubyte * 16)(), C.create_string_buffer(64), C.create_string_buffer(32)
    assert cu.cuDeviceGetUuid(uuid, k) == 0 and cu.cuDeviceGetName(name, 64, k) == 0
    assert cu.cuDeviceGetPCIBusId(bus, 32, k) == 0
    h = bytes(uuid).hex()
    return {"uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
            "name": name.value.decode(), "bus": bus.value.decode()}

print(json.dumps([device(k) for k in range(count.value)]), flush=True)
for _ in sys.stdin:
    print(json.dumps([device(k) for k in range(count.value)]), flush=True)
"""

# A controller that only locks the target, then answers requests as the worker does.
LOCK_THEN_SERVE = r"""
import ctypes as C, json, sys
from xpushare.scheduler.node.checkpoint_worker import Driver, LockArgs, serve
driver = Driver(sys.argv[1])
locked = driver.cu.cuCheckpointProcessLock(int(sys.argv[2]), C.byref(LockArgs(10000))) == 0
print(json.dumps({"ready": locked}), flush=True)
serve(driver, sys.stdin, sys.stdout)
"""


def uuid(phys: int) -> str:
    """The mock's UUID of physical device phys, as NVML writes it."""
    return f"GPU-00000000-0000-0000-0000-0000000000{phys:02x}"


def bus(phys: int) -> str:
    return f"0000:{0x10 + phys:02X}:00.0"


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory) -> Path:
    return build_mock_variant(tmp_path_factory.mktemp("mock")) / "libcuda.so.1"


class Rig:
    """One test's target, controllers, shared directory and mock log."""

    def __init__(self, tmp: Path, lib: Path):
        self.lib, self.log = lib, tmp / "mock.jsonl"
        self.dir = tmp / "ckpt"
        self.dir.mkdir()
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra) -> dict:
        """The process's environment: none of the caller's mock settings; extra's None removes one."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MOCK_CUDA_", "NVSHARE_"))
               and k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
        env.update(MOCK_CUDA_LOG=str(self.log), MOCK_CUDA_DEVICES="2", MOCK_CUDA_CHECKPOINT_DIR=str(self.dir))
        env.update({k: str(v) for k, v in extra.items() if v is not None})
        return {k: v for k, v in env.items() if extra.get(k, "") is not None}

    def _start(self, args, env) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
        self.procs.append(p)
        return p

    def target(self, **env) -> "Target":
        env = self.env(**{"CUDA_VISIBLE_DEVICES": 0, **env})  # one GPU unless told: room to move to
        return Target(self._start(["-c", TARGET, str(self.lib)], env))

    def worker(self, **env) -> "Worker":
        args = ["-m", "xpushare.scheduler.node.checkpoint_worker", str(self.lib)]
        return Worker(self._start(args, self.env(**env)))

    def locking_worker(self, pid: int, **env) -> "Worker":
        return Worker(self._start(["-c", LOCK_THEN_SERVE, str(self.lib), str(pid)], self.env(**env)))

    def restores(self, pid: int) -> list[dict]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [e for e in map(json.loads, lines)
                if e["fn"] == "cuCheckpointProcessRestore" and e["target"] == pid]

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
            p.stdin.close()
            p.stdout.close()


class Target:
    def __init__(self, proc: subprocess.Popen):
        self.proc, self.pid = proc, proc.pid
        self.first = self._read()

    def _read(self) -> list[dict]:
        line = self.proc.stdout.readline()
        assert line, f"the target ended (exit {self.proc.poll()})"
        return json.loads(line)

    def devices(self) -> list[dict]:
        """What its ordinals are now, in its own words."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self._read()


class Worker:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        assert json.loads(proc.stdout.readline()) == {"ready": True}

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


@pytest.fixture
def rig(tmp_path, libcuda):
    r = Rig(tmp_path, libcuda)
    yield r
    r.close()


def _suspend(worker, target):
    answer = worker.ask(op="suspend", pid=target.pid, timeout_ms=5000)
    assert answer["ok"] and set(answer["ms"]) == {"lock", "checkpoint"}, answer


def _suspended(rig, **env):
    target, worker = rig.target(**env), rig.worker(**env)
    _suspend(worker, target)
    return target, worker


def test_a_move_puts_the_process_on_the_new_gpu_with_the_old_bus_id(rig):
    target, worker = _suspended(rig, MOCK_CUDA_DEVICE_NAMES="H200,H200")
    assert target.first == [{"uuid": uuid(0), "name": "H200", "bus": bus(0)}]
    answer = worker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(1)]])
    assert answer["ok"] and answer["moved"] is True and answer["error"] is None, answer
    assert set(answer["ms"]) == {"restore", "unlock"}
    (restore,) = rig.restores(target.pid)
    assert restore["ret"] == 0 and restore["moved"] == "0>1,1>0", "every GPU of the node named"
    assert target.devices() == [{"uuid": uuid(1), "name": "H200", "bus": bus(0)}], \
        "the new GPU's identity, the old GPU's bus id"


def test_moves_compose_and_one_restore_may_swap_gpus(rig):
    names = "A,A,A"
    target, worker = _suspended(rig, MOCK_CUDA_DEVICES=3, MOCK_CUDA_DEVICE_NAMES=names)
    assert worker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(2)]])["moved"]
    assert [d["uuid"] for d in target.devices()] == [uuid(2)]
    _suspend(worker, target)
    assert worker.ask(op="resume", pid=target.pid, pairs=[[uuid(2), uuid(1)]])["moved"]
    assert [(d["uuid"], d["bus"]) for d in target.devices()] == [(uuid(1), bus(0))]

    both = rig.target(MOCK_CUDA_DEVICES=3, MOCK_CUDA_DEVICE_NAMES=names, CUDA_VISIBLE_DEVICES="0,1")
    _suspend(worker, both)
    assert worker.ask(op="resume", pid=both.pid, pairs=[[uuid(0), uuid(1)], [uuid(1), uuid(0)]])["moved"]
    assert [e["moved"] for e in rig.restores(both.pid)] == ["0>1,1>0,2>2"]
    assert [(d["uuid"], d["bus"]) for d in both.devices()] == [(uuid(1), bus(0)), (uuid(0), bus(1))]


@pytest.mark.parametrize("names, pairs, env, code, why", [
    ("H200,H100", [[0, 1]], {}, INVALID_VALUE, "another chip type"),
    # a worker whose driver sees one of the node's two GPUs hands the driver a mapping of one
    ("", [[0, 0]], {"CUDA_VISIBLE_DEVICES": "0"}, INVALID_VALUE, "not every GPU once as old and once as new"),
    ("", [[0, 1]], {"MOCK_CUDA_CHECKPOINT_DIR": None}, NOT_SUPPORTED, "no MOCK_CUDA_CHECKPOINT_DIR"),
])
def test_a_refused_move_leaves_the_process_checkpointed_for_a_plain_resume(rig, names, pairs, env, code,
                                                                           why):
    target = rig.target(MOCK_CUDA_DEVICE_NAMES=names)
    worker = rig.worker(MOCK_CUDA_DEVICE_NAMES=names, **env)
    _suspend(worker, target)
    answer = worker.ask(op="resume", pid=target.pid, pairs=[[uuid(o), uuid(n)] for o, n in pairs])
    assert not answer["ok"] and "moved" not in answer and answer["retry"] is False, answer
    assert answer["error"].startswith("restore: CUDA_ERROR_")
    (refused,) = rig.restores(target.pid)
    assert (refused["ret"], refused["state"], refused["error"]) == (code, CHECKPOINTED, why)
    answer = worker.ask(op="resume", pid=target.pid)
    assert answer["ok"] and "moved" not in answer and set(answer["ms"]) == {"restore", "unlock"}, answer
    assert [e["ret"] for e in rig.restores(target.pid)] == [code, 0], "restored from the checkpoint"
    assert target.devices() == target.first, "where it was"


def test_a_pair_naming_a_gpu_the_node_lacks_is_refused_before_the_driver_is_asked(rig):
    target, worker = _suspended(rig)
    answer = worker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(7)]])
    assert answer == {"ok": False, "ms": {}, "retry": False,
                      "error": f"cannot move: {uuid(7)} is not a GPU of this node"}
    assert rig.restores(target.pid) == []
    assert worker.ask(op="resume", pid=target.pid)["ok"], "still checkpointed, resumable"
    assert target.devices() == target.first


def test_the_other_gpus_are_named_onto_themselves_and_the_new_one_onto_the_old(rig):
    target, worker = _suspended(rig, MOCK_CUDA_DEVICES=4)
    assert worker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(2)]])["moved"]
    assert [e["moved"] for e in rig.restores(target.pid)] == ["0>2,1>1,2>0,3>3"]
    assert [d["uuid"] for d in target.devices()] == [uuid(2)]


@pytest.mark.parametrize("bad", [
    "GPU-00000000-0000-0000-0000-00000000000", "00000000-0000-0000-0000-000000000001",
    "MIG-00000000-0000-0000-0000-000000000001", "GPU-0000000g-0000-0000-0000-000000000001", 7, [uuid(1)]])
def test_a_malformed_pair_is_a_bad_request_with_no_driver_call(rig, bad):
    target, worker = _suspended(rig)
    pairs = [[uuid(0), bad]] if not isinstance(bad, list) else [bad]
    answer = worker.ask(op="resume", pid=target.pid, pairs=pairs)
    assert answer["ok"] is False and answer["retry"] is False, answer
    assert answer["error"].startswith("bad request"), answer
    assert rig.restores(target.pid) == []
    assert worker.ask(op="resume", pid=target.pid)["ok"], "still checkpointed, resumable"


def test_pairs_for_a_process_not_checkpointed_are_refused_not_dropped(rig):
    target = rig.target()
    locker = rig.locking_worker(target.pid)
    answer = locker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(1)]])
    assert answer == {"ok": False, "ms": {}, "retry": False,
                      "error": "not checkpointed: cannot move (the process is locked)"}
    assert rig.restores(target.pid) == []
    unlocked = locker.ask(op="resume", pid=target.pid)
    assert unlocked["ok"] and set(unlocked["ms"]) == {"unlock"} and "moved" not in unlocked, "as before"
    running = rig.worker().ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(1)]])
    assert running["ok"] is False
    assert running["error"] == "not checkpointed: cannot move (the process is running)"
    assert target.devices() == target.first


def test_a_driver_older_than_580_is_not_asked_to_move_and_the_process_stays_checkpointed(rig):
    target, worker = _suspended(rig, MOCK_CUDA_DRIVER_VERSION="12080")
    answer = worker.ask(op="resume", pid=target.pid, pairs=[[uuid(0), uuid(1)]])
    assert answer["ok"] is False and answer["retry"] is False and "moved" not in answer, answer
    assert "CUDA 12.8" in answer["error"] and "580" in answer["error"]
    assert rig.restores(target.pid) == [], "no restore it would have done where it was"
    assert worker.ask(op="resume", pid=target.pid)["ok"], "a plain resume restores it"
    assert target.devices() == target.first
