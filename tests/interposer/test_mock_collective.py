"""The mock driver's collective (tests/mock/cuda/timeline.c), without the interposer: a kernel
launched with MOCK_COLLECTIVE_FUNCTION ends only once every rank of its job (a process per
device, meeting in MOCK_CUDA_COLLECTIVE_DIR) launched its own. The gang-scheduling tests rely on
it to reproduce the deadlock of distributed jobs that take turns.

Times compared across processes are CLOCK_MONOTONIC (the mock's log and cuda_app's lines).
"""

import time

import pytest

from .harness import poll

KERNEL_US = 2000


@pytest.fixture
def world(bare_world):
    return bare_world


def _rank(world, job_dir, rank: int, steps: int, *extra):
    env = {"MOCK_CUDA_DEVICES": 2, "MOCK_CUDA_KERNEL_US": KERNEL_US,
           "MOCK_CUDA_COLLECTIVE_DIR": job_dir}
    return world.app("init", "ctx", rank, "stream", *extra, "collective", steps, 2, env=env,
                     preload=False)


def _collective_launches(log, pid):
    return [e for e in log.entries(pid, "cuLaunchKernel") if "collective" in e]


def test_two_ranks_meet_in_every_collective(world):
    job = world.dir / "job"
    r0, r1 = _rank(world, job, 0, 10), _rank(world, job, 1, 10)
    assert r0.finish() == 0 and r1.finish() == 0
    assert r0.wait_step("done")["steps"] == r1.wait_step("done")["steps"] == 10
    assert [s["ret"] for s in r0.steps("collective") + r1.steps("collective")] == [0] * 20
    assert [e["collective"] for e in _collective_launches(world.log, r0.pid)] == list(range(1, 11))
    done = {(e["pid"], e["k"]): e for e in world.log.entries(fn="mock_collective")}
    for k in range(1, 11):
        a, b = done[(r0.pid, k)], done[(r1.pid, k)]
        assert a["world"] == b["world"] == 2 and (a["rank"], b["rank"]) == (0, 1)
        # one collective, one end: the last rank's start plus the kernel's duration
        assert a["t1"] == b["t1"] == max(a["t0"], b["t0"]) + KERNEL_US * 1000


def test_a_collective_waits_for_its_peer(world):
    job = world.dir / "job"
    alone = _rank(world, job, 0, 1)
    # its collective is launched (the launch returned at once) ...
    poll(lambda: _collective_launches(world.log, alone.pid), what="rank 0's collective launch")
    time.sleep(0.5)  # ... but its synchronisation does not return while the peer is absent
    assert not alone.steps("collective") and alone.proc.poll() is None
    assert not world.log.entries(alone.pid, "mock_collective")

    peer = _rank(world, job, 1, 1)
    assert peer.finish() == 0 and alone.finish() == 0
    (peer_launch,) = _collective_launches(world.log, peer.pid)
    (own_launch,) = _collective_launches(world.log, alone.pid)
    assert own_launch["t1"] < peer_launch["t0"]
    # the ordering that matters: the lone rank's synchronisation returned after the peer launched
    assert alone.wait_step("collective")["t"] > peer_launch["t0"]
    assert alone.wait_step("done")["steps"] == 1


def test_jobs_do_not_meet_each_other(world):
    """Two jobs on the same devices meet only their own ranks (one directory per job)."""
    a0 = _rank(world, world.dir / "a", 0, 1)
    b1 = _rank(world, world.dir / "b", 1, 1)
    poll(lambda: _collective_launches(world.log, a0.pid) and _collective_launches(world.log, b1.pid),
         what="both collectives launched")
    time.sleep(0.3)
    assert not a0.steps("collective") and not b1.steps("collective")
    a1 = _rank(world, world.dir / "a", 1, 1)
    assert a1.finish() == 0 and a0.finish() == 0
    assert b1.proc.poll() is None, "job b's rank 0 never came: its collective still waits"
    b1.kill()


def test_without_a_job_directory_a_collective_is_an_ordinary_kernel(world):
    app = world.run("init", "ctx", 0, "stream", "collective", 3, 1, preload=False,
                    env={"MOCK_CUDA_DEVICES": 2, "MOCK_CUDA_KERNEL_US": KERNEL_US})
    assert app.wait_step("done")["steps"] == 3
    assert [e["collective"] for e in _collective_launches(world.log, app.pid)] == [0, 0, 0]
