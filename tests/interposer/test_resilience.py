"""The application is never harmed: no scheduler, a scheduler that dies and comes back, waiting for
a scheduler on request, fork, several GPUs, CUDA_VISIBLE_DEVICES, and what the library prints."""

import os
import signal
import socket
import struct
import threading
import time

import pytest

from xpushare.wire.protocol import MessageType, encode_frame

from .fake_scheduler import Received, RecordingScheduler
from .harness import poll, uuid_of


def _warnings(app):
    return [ln for ln in app.stderr().splitlines() if ln.startswith(f"nvshare[{app.pid}]: warning")]


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_no_scheduler_runs_ungated_with_one_warning(world):
    app = world.run("init", "ctx", 0, "alloc", "1M", "launch", 3, "verify", "call", "cuMemsetD8",
                    "meminfo", "free", "last", timeout=30)
    assert app.wait_step("launch")["ret"] == 0 and app.wait_step("verify")["ok"] == 1
    assert app.wait_step("call")["ret"] == 0
    assert len(world.log.work(app.pid)) == 3 + 2 + 1
    lines = app.stderr().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nvshare[{app.pid}]: warning"), lines
    assert world.log.entries(app.pid, "cuMemAllocManaged"), "allocations are converted all the same"


def test_warning_is_printed_before_waiting_threads_run_ungated(world):
    """A program that exits right after its first gated call (which waited for the client thread
    to find no scheduler) still prints its one warning: the client prints it before it lets the
    waiting threads run. The race it guards against is a matter of timing: several runs, each on
    one CPU, where the woken application thread tends to run before the client thread goes on."""
    cpu = min(os.sched_getaffinity(0))
    for _ in range(10):
        app = world.run("init", "ctx", 0, "launch", 1, timeout=30, cpu=cpu)
        assert app.wait_step("launch")["ret"] == 0
        assert len(_warnings(app)) == 1, f"pid {app.pid}: {app.stderr()!r}"


def _threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def _blocked_in_a_futex(tid: int) -> bool:
    """The thread sleeps in a futex wait (a pthread condition variable: the library's gate)."""
    try:
        with open(f"/proc/{tid}/task/{tid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{tid}/task/{tid}/wchan") as f:
            wchan = f.read()
    except OSError:
        return False
    return state == "S" and "futex" in wchan


def test_require_scheduler_waits_until_one_appears(world):
    app = world.app("init", "ctx", 0, "launch", 1, env={"NVSHARE_REQUIRE_SCHEDULER": 1})
    app.wait_step("ctx")
    # the client said it waits for a scheduler, and the launch sleeps at the gate
    poll(lambda: "waiting for it (NVSHARE_REQUIRE_SCHEDULER=1)" in app.stderr(), timeout=15,
         what="the warning that the library waits for a scheduler")
    poll(lambda: _blocked_in_a_futex(app.pid) or app.has_step("launch") or app.proc.poll() is not None,
         timeout=15, what="the launching thread to block")
    assert not app.has_step("launch") and app.proc.poll() is None, "it must wait, not run or exit"
    started_at = time.monotonic_ns()  # CLOCK_MONOTONIC, as the mock's t0
    world.scheduler(mode="serial")
    assert app.finish(timeout=30) == 0
    assert app.wait_step("launch")["ret"] == 0
    (launch,) = world.log.work(app.pid)
    assert launch["t0"] > started_at, "the launch ran before there was a scheduler"


def test_scheduler_killed_and_restarted(world):
    sched = world.scheduler(mode="serial")
    env = {"NVSHARE_IDLE_RELEASE_MS": 60000}
    app = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 5, "pause", "launch", 1, "pause",
                    env=env)
    app.paused()
    sched.wait_holder(app.pid)
    sched.kill(signal.SIGKILL)
    app.resume()
    app.paused(nth=2, timeout=15)  # ran its 5 launches without a scheduler
    assert app.steps("launch")[1]["ret"] == 0
    poll(lambda: len(_warnings(app)) == 1, timeout=10, what="the warning that the scheduler is gone")

    again = world.scheduler(mode="serial")
    again.wait_client(app.pid, timeout=30)  # the client re-registers by itself
    app.resume()
    app.paused(nth=3)
    again.wait_holder(app.pid)  # and asks for the lock again at its next gated call
    app.resume()
    assert app.finish() == 0
    assert len(_warnings(app)) == 1, app.stderr()
    assert len(world.log.work(app.pid)) == 7


def test_fork_child_using_cuda_registers_on_its_own(world):
    sched = world.scheduler(mode="off")
    app = world.app("init", "ctx", 0, "launch", 1, "fork", "{", "ctx", 0, "launch", 1, "pause", "}",
                    "pause")
    child = poll(lambda: next((ln for ln in app.steps("launch") if ln["pid"] != app.pid), None),
                 what="the child's launch")
    assert child["ret"] == 0
    poll(lambda: {app.pid, child["pid"]} <= sched.client_pids(), timeout=15,
         what="parent and child both registered")
    assert sched.client(child["pid"])["gpus"][0]["uuid"] == uuid_of(0)
    app.resume()  # the child reads it
    fork = app.wait_step("fork")
    assert (fork["exited"], fork["status"]) == (1, 0)
    app.paused(nth=2)  # the parent's own pause (the first was the child's)
    app.resume()
    assert app.finish() == 0
    assert app.stderr() == ""


def test_fork_child_without_cuda_is_not_disturbed(world):
    sched = world.scheduler(mode="off")
    app = world.app("init", "ctx", 0, "launch", 1, "fork", "{", "sleep", 50, "pause", "}", "pause")
    sched.wait_client(app.pid)
    paused = app.wait_step("pause", state="waiting")
    child_pid = paused["pid"]
    assert child_pid != app.pid
    # Only the library's client thread registers a process. The paused child runs one thread (its
    # own, blocked reading stdin): no client thread was started, so none can register it before it
    # exits; and it is not registered now.
    assert _threads(child_pid) == [child_pid], "the child started a thread (the scheduler client?)"
    assert child_pid not in sched.client_pids(), "a child that never used CUDA registered"
    app.resume()
    fork = app.wait_step("fork", timeout=15)
    assert (fork["exited"], fork["status"], fork["signal"]) == (1, 0, 0)
    app.paused(nth=2)
    app.resume()
    assert app.finish() == 0
    assert app.stderr() == ""


def test_lock_per_device(world):
    sched = world.scheduler(mode="serial")
    env = {"MOCK_CUDA_DEVICES": 2}
    holder = world.app("init", "ctx", 0, "launch", 1, "pause",
                       env={**env, "NVSHARE_IDLE_RELEASE_MS": 60000})
    holder.paused()
    sched.wait_holder(holder.pid, uuid=uuid_of(0))
    other_gpu = world.app("init", "ctx", 1, "launch", 3, env=env)
    assert other_gpu.finish(timeout=15) == 0, "GPU 1 is free while GPU 0 is held"
    same_gpu = world.app("init", "ctx", 0, "launch", 1, env=env)
    poll(lambda: same_gpu.pid in sched.queue(uuid_of(0)), what="the GPU 0 client to queue")
    assert not same_gpu.has_step("launch")
    holder.resume()
    assert holder.finish() == 0 and same_gpu.finish() == 0
    # Both GPUs were made known by their clients (no NVML): each is forgotten with its last client.
    poll(lambda: sched.status()["gpus"] == [], what="the client-made GPUs to be forgotten")


def test_one_process_on_two_devices(world):
    sched = world.scheduler(mode="off")
    app = world.app("init", "ctx", 0, "launch", 1, "ctx", 1, "launch", 1, "totalmem", 1, "pause",
                    env={"MOCK_CUDA_DEVICES": 2, "NVSHARE_GPU_MEMORY": "8G",
                         "NVSHARE_IDLE_RELEASE_MS": 60000})
    app.paused()
    assert app.wait_step("totalmem")["total"] == 8 << 30

    def both():
        c = sched.client(app.pid)
        return c and sorted((g["device"], g["uuid"]) for g in c["gpus"]) == [(0, uuid_of(0)), (1, uuid_of(1))]
    poll(both, what="the client attached to both devices")
    sched.wait_holder(app.pid, uuid=uuid_of(0))
    sched.wait_holder(app.pid, uuid=uuid_of(1))
    app.resume()
    assert app.finish() == 0
    assert [e["dev"] for e in world.log.work(app.pid)] == [0, 1]


def test_cuda_visible_devices_maps_to_the_physical_uuid(world):
    sched = world.scheduler(mode="off")
    app = world.app("init", "ctx", 0, "launch", 1, "pause",
                    env={"MOCK_CUDA_DEVICES": 2, "CUDA_VISIBLE_DEVICES": "1"})
    app.paused()
    c = sched.wait_client(app.pid)
    poll(lambda: sched.client(app.pid)["gpus"], what="the device attach")
    assert [(g["device"], g["uuid"]) for g in sched.client(app.pid)["gpus"]] == [(0, uuid_of(1))]
    assert sched.gpu(uuid_of(1))["name"] == "Mock GPU 1"
    assert sched.gpu(uuid_of(0)) is None
    assert c["pid"] == app.pid
    app.resume()
    assert app.finish() == 0


def test_debug_prints_prefixed_decisions(world):
    world.scheduler(mode="serial")
    app = world.run("init", "ctx", 0, "alloc", "1M", "launch", 1, env={"NVSHARE_DEBUG": 1})
    lines = app.stderr().splitlines()
    assert len(lines) >= 3, lines
    assert all(ln.startswith(f"nvshare[{app.pid}]: ") for ln in lines), lines


def test_silent_without_debug(world):
    world.scheduler(mode="serial")
    app = world.run("init", "ctx", 0, "alloc", "1M", "launch", 1, "free", "last")
    assert app.stderr() == ""


def test_process_that_never_uses_cuda_pays_nothing(world):
    """Preloaded into a process that never calls CUDA: no connection, no output."""
    sched = world.scheduler(mode="off")
    app = world.app("sleep", 300, "pause")
    app.paused()
    assert app.pid not in sched.client_pids()
    app.resume()
    assert app.finish() == 0
    assert app.stderr() == ""
    assert world.log.entries(app.pid) == []


def test_malformed_scheduler_replies_never_harm_the_application(world):
    """A 'scheduler' that answers with garbage: the client drops the connection and runs on."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(world.socket))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()
    served = []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    conn.recv(4096)
                    conn.sendall(b"\xde\xad\xbe\xef" * 8)  # not a frame: wrong magic
                    served.append(1)
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        app = world.run("init", "ctx", 0, "alloc", "1M", "launch", 3, "verify", timeout=60)
    finally:
        stop.set()
        t.join(5)
        srv.close()
    assert served, "the client never connected to the fake scheduler"
    assert app.wait_step("launch")["ret"] == 0 and app.wait_step("verify")["ok"] == 1
    assert len(world.log.work(app.pid)) == 3 + 2
    assert len(_warnings(app)) == 1, app.stderr()


class _OldSizeGrants(RecordingScheduler):
    """Answers REQ_LOCK with a version-1-sized LOCK_OK (8 bytes) in a version-2 frame."""

    def _handle(self, conn, n, mtype, msg):
        if mtype != MessageType.REQ_LOCK:
            return super()._handle(conn, n, mtype, msg)
        with self._mu:
            self.received.append(Received(time.monotonic(), n, mtype, msg))
        conn.sendall(encode_frame(MessageType.LOCK_OK, struct.pack("<II", msg.device, 0)))


def test_a_grant_of_the_wrong_size_closes_the_connection_and_the_app_runs_on(world):
    """Protocol version 2: LOCK_OK is 16 bytes. A frame whose payload does not match its type's
    size is malformed: the client logs it, closes the connection and runs ungated."""
    sched = _OldSizeGrants(world.socket)
    try:
        app = world.run("init", "ctx", 0, "alloc", "1M", "launch", 3, "verify", timeout=60)
    finally:
        sched.close()
    assert sched.messages(MessageType.REQ_LOCK), "the client asked for the lock"
    assert app.wait_step("launch")["ret"] == 0 and app.wait_step("verify")["ok"] == 1
    (warning,) = _warnings(app)
    assert "malformed" in warning and "expected 16" in warning, warning
