"""Suspending a whole client (native/src/session/suspend.c, src/xpushare/scheduler/node/suspend.py): the
real scheduler asks an idle client to move all of its memory out, then its checkpoint worker locks
and checkpoints the process through the driver (the mock's cuCheckpointProcess*, which keep each
target's state and log every call); the client's next GPU call asks to run, the worker restores and
unlocks it, and its memory comes back at its grant. Where the driver cannot checkpoint the process
(managed memory) or a step fails, it runs on, and status says why."""

from __future__ import annotations

import pytest

from test_metrics import free_port, scrape, value
from testkit.waiting import poll

MIB = 1 << 20
OOM = 2


def _scheduler(world, *args, **env):
    return world.scheduler(mode="auto", extra_args=("--cuda-library", str(world.artifacts.libcuda), *args),
                           env={"MOCK_CUDA_LOG": str(world.log.path), **env})


def _app(world, *before, env_extra=None):
    """An app with 3 MiB of converted memory, filled, that launched once and now waits; resumed,
    it reads the memory back (a gated call)."""
    env = {"NVSHARE_IDLE_RELEASE_MS": 50, **(env_extra or {})}
    app = world.app("init", "ctx", 0, *before, "alloc", "3M", "fill", 7, "launch", 1, "pause", "check", 7,
                    env=env)
    app.paused()
    return app


def _phase(sched, pid):
    client = sched.client(pid)
    return client and client["suspend"]["phase"]


def _idle(sched, pid):
    poll(lambda: (sched.client(pid) or {}).get("state") == "idle", 15, what="the client idle")


def _calls(log, pid, fn):
    return [e for e in log.entries() if e["fn"] == fn and e.get("target") == pid]


def test_an_idle_client_suspends_whole_and_resumes_at_its_next_call(world):
    port = free_port()
    sched = _scheduler(world, "--metrics-port", str(port), "--metrics-max-age", "0")
    app = _app(world)
    _idle(sched, app.pid)
    answer = sched.ctl("suspend", pid=app.pid)
    assert answer["ok"] and answer["clients"][0]["suspending"], answer
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended")
    client = sched.client(app.pid)
    assert client["state"] == "suspended" and client["suspend"]["suspends"] == 1
    assert set(client["suspend"]["ms"]) == {"lock", "checkpoint"}
    me = {"pid": str(app.pid)}
    asleep = scrape(port)
    assert value(asleep, "xpushare_client_suspended", **me) == 1
    assert value(asleep, "xpushare_client_suspends_total", **me) == 1

    app.resume()  # "check": a gated call while suspended asks to run
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1, "its memory came back intact"
    log = world.log
    (alloc,) = app.steps("alloc")
    (lock,) = _calls(log, app.pid, "cuCheckpointProcessLock")
    (ckpt,) = _calls(log, app.pid, "cuCheckpointProcessCheckpoint")
    (restore,) = _calls(log, app.pid, "cuCheckpointProcessRestore")
    (unlock,) = _calls(log, app.pid, "cuCheckpointProcessUnlock")
    out = [e for e in log.entries(app.pid, "cuMemUnmap") if e["ptr"] == alloc["ptr"]]
    back = [e for e in log.entries(app.pid, "cuMemMap") if e["ptr"] == alloc["ptr"]]
    (read,) = log.entries(app.pid, "cuMemcpyDtoH_v2")
    assert out and out[0]["t1"] <= lock["t0"], "its memory left before the lock"
    assert lock["t1"] <= ckpt["t0"] and ckpt["t1"] <= restore["t0"] and restore["t1"] <= unlock["t0"]
    assert [e for e in log.entries(app.pid) if lock["t1"] < e["t0"] < unlock["t0"]] == [], \
        "no driver call of the client while it was locked"
    assert len(back) == 2 and unlock["t1"] <= back[1]["t0"] <= read["t0"], "mapped back after the unlock"
    assert sched.client(app.pid) is None or sched.client(app.pid)["suspend"]["resumes"] == 1


def test_managed_memory_is_never_checkpointed_and_status_says_why(world):
    sched = _scheduler(world)
    app = _app(world, "managed", "1M")
    _idle(sched, app.pid)
    assert sched.ctl("suspend", pid=app.pid)["ok"]
    poll(lambda: (sched.client(app.pid)["suspend"]["refused"] or "") != "", 15, what="a refusal")
    client = sched.client(app.pid)
    assert "managed memory" in client["suspend"]["refused"] and client["suspend"]["phase"] is None
    assert _calls(world.log, app.pid, "cuCheckpointProcessLock") == []
    app.resume()
    assert app.finish() == 0 and app.steps("check")[0]["ok"] == 1


def test_a_refused_checkpoint_leaves_the_client_running(world):
    sched = _scheduler(world, MOCK_CUDA_CHECKPOINT_FAIL="checkpoint")
    app = _app(world)
    _idle(sched, app.pid)
    assert sched.ctl("suspend", pid=app.pid)["ok"]
    poll(lambda: "checkpoint" in (sched.client(app.pid)["suspend"]["refused"] or ""), 15,
         what="the failed checkpoint")
    log = world.log
    (lock,) = _calls(log, app.pid, "cuCheckpointProcessLock")
    (ckpt,) = _calls(log, app.pid, "cuCheckpointProcessCheckpoint")
    (unlock,) = _calls(log, app.pid, "cuCheckpointProcessUnlock")
    assert ckpt["ret"] != 0 and lock["t1"] <= ckpt["t0"] and ckpt["t1"] <= unlock["t0"] and unlock["ret"] == 0
    app.resume()
    assert app.finish() == 0 and app.steps("check")[0]["ok"] == 1
    assert _calls(log, app.pid, "cuCheckpointProcessRestore") == []


def test_a_restore_without_room_is_tried_again_until_it_succeeds(world):
    sched = _scheduler(world, MOCK_CUDA_CHECKPOINT_FAIL="restore:2")
    app = _app(world)
    _idle(sched, app.pid)
    assert sched.ctl("suspend", pid=app.pid)["ok"]
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended")
    app.resume()
    assert app.finish() == 0 and app.steps("check")[0]["ok"] == 1
    restores = _calls(world.log, app.pid, "cuCheckpointProcessRestore")
    assert [r["ret"] for r in restores] == [OOM, OOM, 0], "retried, never left stuck"
    (unlock,) = _calls(world.log, app.pid, "cuCheckpointProcessUnlock")
    assert restores[-1]["t1"] <= unlock["t0"]


def test_suspend_asks_nothing_of_a_client_holding_the_gpu_and_needs_an_admin(world):
    sched = _scheduler(world)
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused()
    poll(lambda: (sched.client(app.pid) or {}).get("state") == "holding", 15, what="holding")
    answer = sched.ctl("suspend", pid=app.pid)
    assert answer["ok"] and answer["clients"] == [
        {"pid": app.pid, "client_id": sched.client(app.pid)["client_id"], "suspending": False,
         "why": "it holds or waits for a GPU"}]
    assert sched.ctl("suspend", pid=1)["ok"] is False, "no client with that pid"
    app.resume()
    assert app.finish() == 0


@pytest.mark.parametrize("after", [0.3])
def test_suspend_idle_suspends_a_client_idle_that_long(world, after):
    sched = world.scheduler(mode="auto", extra_args=("--cuda-library", str(world.artifacts.libcuda),
                                                     "--suspend-idle", str(after)),
                            env={"MOCK_CUDA_LOG": str(world.log.path)})
    app = _app(world)
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended by itself")
    app.resume()
    assert app.finish() == 0 and app.steps("check")[0]["ok"] == 1
    assert "suspend pid=%d" % app.pid in sched.log() and f"idle {after:g} s" in sched.log()


def test_a_suspended_client_that_opens_a_second_gpu_gets_its_first_gpus_memory_back_first(world):
    """Suspended whole on device 0 (its memory out), the process wakes and reads that memory from a
    context on device 1, which device 0's gate does not cover: it is resumed, asks for device 0's
    lock, and the read finds the bytes (a real scheduler: the process is now on two GPUs, one job)."""
    sched = world.scheduler(mode="auto", extra_args=("--cuda-library", str(world.artifacts.libcuda),
                                                     "--suspend-idle", "0.2"),
                            env={"MOCK_CUDA_LOG": str(world.log.path)})
    app = world.app("init", "ctx", 0, "alloc", "3M", "fill", 7, "launch", 1, "pause", "ctx", 1,
                    "check", 7, env={"NVSHARE_IDLE_RELEASE_MS": 50, "MOCK_CUDA_DEVICES": 2})
    app.paused()
    poll(lambda: _phase(sched, app.pid) == "suspended", 15, what="suspended by itself")
    (ptr,) = [ln["ptr"] for ln in app.lines if ln.get("step") == "alloc"]
    assert [e["ptr"] for e in world.log.entries(app.pid, "cuMemUnmap")] == [ptr]
    app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1]
    maps = [e for e in world.log.entries(app.pid, "cuMemMap") if e["ptr"] == ptr]
    assert len(maps) == 2, "mapped back at device 0's grant"
