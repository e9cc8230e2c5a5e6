"""Work gating against the real scheduler: serialisation, concurrency in mode off, time quanta,
early release, a holder killed, and CUDA graph capture safety.

Gated calls in the mock take MOCK_CUDA_WORK_US each and are logged with [t0, t1] on
CLOCK_MONOTONIC, so intervals from different processes can be compared.
"""

import time

from .harness import DRAIN_CALLS, overlaps, poll

WORK_US = 20000  # 20 ms per gated call


def _two_apps_released_together(world, n_launches):
    env = {"MOCK_CUDA_WORK_US": WORK_US}
    a = world.app("init", "ctx", 0, "pause", "launch", n_launches, env=env)
    b = world.app("init", "ctx", 0, "pause", "launch", n_launches, env=env)
    a.paused(), b.paused()
    a.resume(), b.resume()
    assert a.finish() == 0 and b.finish() == 0
    wa, wb = world.log.work(a.pid), world.log.work(b.pid)
    assert len(wa) == len(wb) == n_launches
    return wa, wb


def test_serial_mode_never_overlaps_work(world):
    world.scheduler(mode="serial")
    wa, wb = _two_apps_released_together(world, 15)
    assert overlaps(wa, wb) == [], "in serial mode one process at a time may run"


def test_mode_off_lets_work_overlap(world):
    sched = world.scheduler(mode="off")
    env = {"MOCK_CUDA_WORK_US": WORK_US, "NVSHARE_IDLE_RELEASE_MS": 60000}
    a = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 15, env=env)
    b = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 15, env=env)
    a.paused(), b.paused()
    poll(lambda: sched.holders() == {a.pid, b.pid}, what="both processes to hold the GPU at once")
    a.resume(), b.resume()
    assert a.finish() == 0 and b.finish() == 0
    wa, wb = world.log.work(a.pid), world.log.work(b.pid)
    assert len(wa) == len(wb) == 16
    assert overlaps(wa, wb), "in mode off both processes run at once"


def test_time_quantum_expiry_hands_the_gpu_over(world):
    sched = world.scheduler(mode="serial", tq=1)
    env = {"MOCK_CUDA_WORK_US": WORK_US, "NVSHARE_IDLE_RELEASE_MS": 60000}
    a = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 150, env=env)  # about 3 s of work
    a.paused()
    sched.wait_holder(a.pid)
    b = world.app("init", "ctx", 0, "launch", 5, env={"MOCK_CUDA_WORK_US": WORK_US})
    poll(lambda: b.pid in sched.queue(), what="the second process to wait for the lock")
    a.resume()
    assert b.finish(timeout=60) == 0
    assert a.finish(timeout=60) == 0
    wa, wb = world.log.work(a.pid), world.log.work(b.pid)
    assert len(wb) == 5
    assert overlaps(wa, wb) == []
    assert max(e["t1"] for e in wb) < max(e["t0"] for e in wa), \
        "the waiter must run when the holder's quantum ends, not after the holder's whole run"


def test_idle_holder_releases_early(world):
    sched = world.scheduler(mode="serial", tq=30)
    a = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 1, env={"NVSHARE_IDLE_RELEASE_MS": 1000})
    a.paused()
    sched.wait_holder(a.pid, timeout=0.9)
    poll(lambda: a.pid not in sched.holders(), timeout=10, what="the idle holder to release the lock")
    b = world.app("init", "ctx", 0, "launch", 3)
    assert b.finish(timeout=15) == 0, "the lock must be free while the first process is idle"
    a.resume()
    assert a.finish() == 0
    assert a.steps("launch")[-1]["ret"] == 0, "the idle process gets the lock back at its next call"
    wa, wb = world.log.work(a.pid), world.log.work(b.pid)
    assert wa[0]["t1"] < wb[0]["t0"] and wb[-1]["t1"] < wa[1]["t0"]


def test_idle_release_time_is_configurable(world):
    sched = world.scheduler(mode="serial", tq=30)
    a = world.app("init", "ctx", 0, "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 1500})
    a.paused()
    sched.wait_holder(a.pid)
    (launch,) = world.log.work(a.pid)
    poll(lambda: a.pid not in sched.holders(), timeout=10, what="the release after 1.5 s idle")
    # The release drains the device first (the client thread synchronises it): the driver's log
    # orders that drain after the launch, and says how long the process was idle before it.
    drain = [e for e in world.log.entries(a.pid) if e["fn"] in DRAIN_CALLS and e["t0"] > launch["t1"]]
    assert drain, "the idle release did not drain the device"
    assert drain[0]["t0"] - launch["t1"] >= 1_000_000_000, "released before NVSHARE_IDLE_RELEASE_MS"
    a.resume()
    assert a.finish() == 0


def test_killed_holder_frees_the_gpu(world):
    sched = world.scheduler(mode="serial", tq=30)
    a = world.app("init", "ctx", 0, "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 60000})
    a.paused()
    sched.wait_holder(a.pid)
    b = world.app("init", "ctx", 0, "launch", 2)
    poll(lambda: b.pid in sched.queue(), what="the second process to queue")
    assert not b.has_step("launch"), "the second process ran while the first held the GPU"
    killed_at = time.monotonic_ns()  # CLOCK_MONOTONIC, as the mock's t0
    a.kill()
    assert b.finish(timeout=15) == 0
    assert b.wait_step("launch")["ret"] == 0
    assert a.pid not in sched.client_pids()
    # the order the driver saw: none of b's work began before the holder was killed
    wb = world.log.work(b.pid)
    assert len(wb) == 2 and wb[0]["t0"] > killed_at, "the second process ran while the first held the GPU"


def test_capture_in_progress_is_never_invalidated_by_the_interposer(world):
    """One thread captures in global mode while another thread's work triggers checkpoints
    (NVSHARE_MAX_INFLIGHT=8) and idle-release drains; the mock refuses (900) any unsafe call made
    outside relaxed mode during the capture and invalidates it."""
    world.scheduler(mode="serial", tq=30)
    env = {"NVSHARE_MAX_INFLIGHT": 8, "NVSHARE_IDLE_RELEASE_MS": 50}
    app = world.run("init", "ctx", 0,
                    # a converted stream-ordered free left pending (deferred) before the capture
                    "stream", "allocasync", "1M", "launch", 2, "freeasync", "last",
                    "stream", "capture-begin", "global", "launch", 3,
                    "thread", "{", "ctx", 0, "stream", "launch", 40, "sleep", 300, "launch", 40,
                    "sleep", 300, "}", "join", "capture-end", "graph-launch", env=env, timeout=60)
    assert [s["ret"] for s in app.steps("launch")] == [0, 0, 0, 0]
    assert app.wait_step("freeasync")["ret"] == 0
    assert app.wait_step("capture-end")["ret"] == 0, "the capture was invalidated"
    assert app.wait_step("graph-launch")["ret"] == 0
    log = world.log
    assert [e for e in log.entries(app.pid) if e["ret"] == 900 or e.get("error")] == []
    begin = log.entries(app.pid, "cuStreamBeginCapture_v2")[0]["t1"]
    end = log.entries(app.pid, "cuStreamEndCapture")[0]["t0"]
    own = [e for e in log.entries(app.pid)
           if e["fn"] in DRAIN_CALLS and begin < e["t0"] < end]
    assert own, "the scenario did not exercise any drain/checkpoint during the capture"


def test_captured_work_does_not_wait_for_the_lock(world):
    sched = world.scheduler(mode="serial", tq=30)
    holder = world.app("init", "ctx", 0, "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 60000})
    holder.paused()
    sched.wait_holder(holder.pid)
    app = world.app("init", "ctx", 0, "alloc", "64K", "stream", "capture-begin", "thread", "launch", 5, "call",
                    "cuMemcpyHtoDAsync", "capture-end", "pause", "graph-launch")
    app.paused(timeout=15)
    assert app.wait_step("launch")["ret"] == 0
    assert app.wait_step("call")["ret"] == 0
    assert app.wait_step("capture-end")["ret"] == 0
    app.resume()
    # it reaches the gate and queues behind the holder
    poll(lambda: app.pid in sched.queue(), what="the graph launch to queue for the lock")
    assert not app.has_step("graph-launch"), "launching the graph is work: it waits for the lock"
    released_at = time.monotonic_ns()  # CLOCK_MONOTONIC, as the mock's t0
    holder.resume()
    assert holder.finish() == 0
    assert app.finish() == 0
    assert app.wait_step("graph-launch")["ret"] == 0
    (launch,) = world.log.entries(app.pid, "cuGraphLaunch")
    assert launch["t0"] > released_at, "launching the graph is work: it waits for the lock"
    assert launch["t0"] > world.log.work(holder.pid)[-1]["t1"]


def test_threads_in_flight_finish_before_the_gpu_changes_hands(world):
    """Several threads submit at once; at each hand-over every call already inside the driver must
    complete before the other process starts (the in-flight count is drained)."""
    world.scheduler(mode="serial", tq=0.3)
    env = {"MOCK_CUDA_WORK_US": 10000}
    worker = ["thread", "{", "ctx", 0, "launch", 40, "}"]
    a = world.app("init", "pause", *worker * 3, "join", env=env)
    b = world.app("init", "pause", *worker * 2, "join", env=env)
    a.paused(), b.paused()
    a.resume(), b.resume()
    assert a.finish(timeout=90) == 0 and b.finish(timeout=90) == 0
    wa, wb = world.log.work(a.pid), world.log.work(b.pid)
    assert (len(wa), len(wb)) == (120, 80)
    assert len({e["tid"] for e in wa}) == 3
    assert overlaps(wa, wb) == []
    # the quantum (0.3 s) is shorter than either run (>= 0.4 s): the GPU changed hands more than once
    owners = [e["pid"] for e in sorted(wa + wb, key=lambda e: e["t0"])]
    handovers = sum(1 for x, y in zip(owners, owners[1:]) if x != y)
    assert handovers >= 2, handovers
