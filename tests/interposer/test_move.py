"""Moving a process to another GPU, whole (docs/suspend.md): the real library in a running program,
the real scheduler (its NVML lists the mock's two GPUs) and its checkpoint worker on the mock
driver, `nvsharectl move` as a user runs it. The mock's restore with GPU pairs records the move
and the program's own driver then names physical device 1 under its ordinal 0; its memory must
come back there intact, and the scheduler must see it on the new GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sched_harness import SchedulerProcess, child_env, uuid
from testkit.waiting import poll

GiB = 1 << 30


@pytest.fixture
def node(world):
    env = {"MOCK_CUDA_LOG": str(world.log.path), "MOCK_CUDA_DEVICES": "2",
           "MOCK_CUDA_CHECKPOINT_DIR": str(world.dir), "MOCK_CUDA_DEVICE_NAMES": "Mock H200,Mock H200"}
    nvml = [{"uuid": uuid(i), "name": "Mock H200", "memory": 16 * GiB} for i in (0, 1)]
    sched = SchedulerProcess(world.socket, ["--cuda-library", str(world.artifacts.libcuda), "--mode", "auto"],
                             env, nvml=nvml, logfile=world.dir / "scheduler.log").start()
    world.schedulers.append(sched)
    # the program sees one GPU (ordinal 0 = physical 0), as a container given one GPU does
    world.base_env.update(CUDA_VISIBLE_DEVICES="0", MOCK_CUDA_DEVICES="2",
                          MOCK_CUDA_CHECKPOINT_DIR=str(world.dir), NVSHARE_IDLE_RELEASE_MS="50")
    return sched


def _nvsharectl(world, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(world.socket), *args],
                          env=child_env(), capture_output=True, text=True, timeout=60)


def _gpus(sched, pid) -> list[str]:
    return [g["uuid"] for g in (sched.client(pid) or {}).get("gpus", [])]


def _moved_file(world, pid) -> list[str]:
    return (world.dir / f"moved-{pid}").read_text().split()


def test_a_running_program_moved_mid_run_finishes_with_its_data_intact_on_the_other_gpu(world, node):
    sched = node
    app = world.app("init", "ctx", 0, "alloc", "3M", "fillall", 7, "launch", 3000, "checkall", 7,
                    "pause", env={"MOCK_CUDA_WORK_US": 1000})
    poll(lambda: (sched.client(app.pid) or {}).get("state") == "holding", 15, what="it runs")
    moved = _nvsharectl(world, "move", str(app.pid), "--to", "1")
    assert moved.returncode == 0, moved.stderr
    assert f"pid {app.pid}: moved to {uuid(1)}" in moved.stdout
    app.paused(timeout=30)  # every launch and the check done
    (launches,) = app.steps("launch")
    assert launches["ret"] == 0 and app.steps("checkall")[0]["ok"] == 1, "its memory came back intact"
    assert _moved_file(world, app.pid) == ["0", "1", "1", "0"]  # every GPU of the node: the swap
    poll(lambda: _gpus(sched, app.pid) == [uuid(1)], 10, what="the scheduler sees it on GPU 1")
    me = sched.client(app.pid)
    assert me["move"]["moves"] == 1 and me["move"]["refused"] is None
    log = world.log
    (lock,) = log.entries(fn="cuCheckpointProcessLock", target=app.pid)
    (unlock,) = log.entries(fn="cuCheckpointProcessUnlock", target=app.pid)
    assert [e for e in log.entries(app.pid) if lock["t1"] < e["t0"] < unlock["t0"]] == [], \
        "no driver call of the program while it was locked"
    (alloc,) = app.steps("alloc")
    out = [e for e in log.entries(app.pid, "cuMemUnmap") if e["ptr"] == alloc["ptr"]]
    back = [e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == alloc["ptr"]]
    assert lock["t0"] < launches["t"], "moved while its launches ran"
    assert out and out[-1]["t1"] <= lock["t0"], "its memory left before the lock"
    assert back and back[-1]["t0"] >= unlock["t1"], "and came back after the restore, at its address"
    app.resume()
    assert app.finish() == 0


def test_an_idle_program_moves_and_its_next_call_finds_its_memory_there(world, node):
    sched = node
    app = world.app("init", "ctx", 0, "alloc", "3M", "fillall", 5, "launch", 1, "pause", "checkall", 5)
    app.paused()
    poll(lambda: (sched.client(app.pid) or {}).get("state") == "idle", 15, what="idle")
    moved = _nvsharectl(world, "move", str(app.pid), "--to", uuid(1), "--no-wait")
    assert moved.returncode == 0 and "moving to" in moved.stdout, moved.stderr
    poll(lambda: _gpus(sched, app.pid) == [uuid(1)], 15, what="attached on GPU 1")
    app.resume()
    assert app.finish() == 0 and app.steps("checkall")[0]["ok"] == 1


def test_nvsharectl_move_says_why_a_program_is_not_moved(world, node):
    app = world.app("init", "ctx", 0, "managed", "1M", "launch", 1, "pause")
    app.paused()
    poll(lambda: (node.client(app.pid) or {}).get("state") == "idle", 15, what="idle")
    refused = _nvsharectl(world, "move", str(app.pid), "--to", "1")
    assert refused.returncode == 1 and "not moved" in refused.stderr and "managed memory" in refused.stderr
    status = json.loads(_nvsharectl(world, "status", "--json").stdout)
    (me,) = [c for c in status["clients"] if c["pid"] == app.pid]
    assert me["move"]["moves"] == 0 and _gpus(node, app.pid) == [uuid(0)]
    app.resume()
    assert app.finish() == 0
