"""Races between application threads and the library's bookkeeping, made deterministic.

- A free racing an allocation: once the driver has freed an address (or released a VMM handle) it
  may hand it to another thread's allocation at once. The mock driver reuses freed memory and
  handles LIFO (MOCK_CUDA_REUSE=1) and holds a free inside the driver, after the release, until
  the test creates a file (MOCK_CUDA_HOLD_FILE); meanwhile another thread allocates and gets the
  same address. The footprint must come back to zero once everything is freed.
- A lock request cut short by a lost scheduler: the waiting thread runs ungated, and the request
  must not be sent again on the next connection, where nobody waits for it (with
  NVSHARE_IDLE_RELEASE_MS=0 the process would then hold the GPU until its quantum ends).
"""

import signal
from pathlib import Path

import pytest

from .harness import GIB, poll

CAPACITY = 16 * GIB  # the mock's default device memory, given as NVSHARE_GPU_MEMORY too
SIZE = "64M"


def _footprint(sched, pid: int) -> tuple[int, int] | None:
    """(managed_bytes, other_bytes) the scheduler last heard from pid for its first GPU."""
    client = sched.client(pid)
    if not client or not client["gpus"]:
        return None
    gpu = client["gpus"][0]
    return gpu["managed_bytes"], gpu["other_bytes"]


# allocating step; the second thread's steps (the free of allocation 0); the free step's name and
# the main thread's final free; the output field naming what was allocated; the driver's free
_KINDS = {
    "converted": ("alloc", ["ctx", 0, "free", 0], "free", ["free", "last"], "ptr", "cuMemFree_v2"),
    "managed": ("managed", ["ctx", 0, "free", 0], "free", ["free", "last"], "ptr", "cuMemFree_v2"),
    "vmm": ("vmm", ["vmmrelease"], "vmmrelease", ["vmmrelease"], "handle", "cuMemRelease"),
}


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
@pytest.mark.parametrize("kind", list(_KINDS))
def test_free_racing_an_allocation_of_the_same_address_keeps_the_footprint(world, kind):
    alloc_step, thread_free, free_step, main_free, field, free_fn = _KINDS[kind]
    sched = world.scheduler(mode="off")
    hold: Path = world.dir / "hold"
    app = world.app("init", "ctx", 0, alloc_step, SIZE,
                    "thread", "{", *thread_free, "}",
                    "pause", alloc_step, SIZE,  # while the thread's free is held in the driver
                    "pause", "join", *main_free, "meminfo", "pause",
                    env={"MOCK_CUDA_REUSE": 1, "MOCK_CUDA_HOLD_FILE": hold,
                         "NVSHARE_GPU_MEMORY": "16G", "NVSHARE_CONTEXT_RESERVE": 0})
    first = app.wait_step(alloc_step)
    assert first["ret"] == 0
    poll(lambda: world.log.entries(app.pid, "mock_hold", of=free_fn), timeout=20,
         what="the second thread's free to be held inside the driver, its memory released")
    app.paused()
    app.resume()
    second = app.wait_step(alloc_step, nth=2)
    assert second["ret"] == 0
    assert second[field] == first[field], "the driver handed the freed address out again"
    app.paused(nth=2)  # the allocation is done, library bookkeeping included
    assert not app.has_step(free_step), "the first free is still inside the driver"
    hold.touch()
    assert app.wait_step(free_step)["ret"] == 0
    app.resume()
    app.paused(nth=3)

    # Both allocations are freed: nothing is counted, in the memory view and at the scheduler.
    assert all(s["ret"] == 0 for s in app.steps(free_step)), app.steps(free_step)
    info = app.wait_step("meminfo")
    assert (info["ret"], info["total"], info["free"]) == (0, CAPACITY, CAPACITY), \
        "a freed allocation is still counted (or a live one is not)"
    poll(lambda: _footprint(sched, app.pid) == (0, 0), timeout=10,
         what=f"the scheduler to see a zero footprint (last: {_footprint(sched, app.pid)})")
    app.resume()
    assert app.finish() == 0
    assert world.log.errors(app.pid) == []


def test_a_lock_wait_cut_short_by_a_lost_scheduler_is_not_asked_for_again(world):
    """Serial mode, no idle release: a holder, and a second app waiting for the lock when the
    scheduler is killed. The waiter then runs ungated and goes idle; the restarted scheduler must
    not give it the lock (nobody there waits for it), so the first app gets it at once."""
    sched = world.scheduler(mode="serial", tq=600)
    env = {"NVSHARE_IDLE_RELEASE_MS": 0}
    holder = world.app("init", "ctx", 0, "launch", 1, "pause", "launch", 1, "pause", env=env)
    holder.paused()
    sched.wait_holder(holder.pid)
    waiter = world.app("init", "ctx", 0, "launch", 1, "pause", env=env)
    poll(lambda: waiter.pid in sched.queue(), timeout=15, what="the second app to wait for the lock")
    assert not waiter.has_step("launch")

    sched.kill(signal.SIGKILL)
    waiter.paused(timeout=20)  # its wait ended: it ran ungated
    assert waiter.wait_step("launch")["ret"] == 0

    again = world.scheduler(mode="serial", tq=600)
    for app in (holder, waiter):  # both re-registered and attached their GPU
        poll(lambda: _footprint(again, app.pid) is not None, timeout=30,
             what=f"pid {app.pid} to re-register with the restarted scheduler")
    holder.resume()
    # The quantum (600 s) is far away: the holder gets the lock only if nobody holds it.
    holder.paused(nth=2, timeout=30)
    assert holder.steps("launch")[1]["ret"] == 0
    assert waiter.pid not in again.holders()
    assert f"grant pid={waiter.pid} " not in again.log(), again.log()
    holder.resume()
    waiter.resume()
    assert holder.finish() == 0 and waiter.finish() == 0


def test_a_waiter_that_requires_the_scheduler_asks_again_after_a_restart(world):
    """The other side of the above: with NVSHARE_REQUIRE_SCHEDULER=1 the waiter keeps waiting
    through the outage and asks the restarted scheduler for the lock by itself."""
    sched = world.scheduler(mode="serial", tq=600)
    holder = world.app("init", "ctx", 0, "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 0})
    holder.paused()
    sched.wait_holder(holder.pid)
    waiter = world.app("init", "ctx", 0, "launch", 1, "pause",
                       env={"NVSHARE_IDLE_RELEASE_MS": 0, "NVSHARE_REQUIRE_SCHEDULER": 1})
    poll(lambda: waiter.pid in sched.queue(), timeout=15, what="the second app to wait for the lock")

    sched.kill(signal.SIGKILL)
    again = world.scheduler(mode="serial", tq=600, start=False)
    poll(lambda: "lost the scheduler connection" in waiter.stderr(), timeout=15,
         what="the waiter to notice the scheduler is gone")
    assert not waiter.has_step("launch"), "it must keep waiting without a scheduler"

    again.start()
    again.wait_holder(waiter.pid, timeout=30)
    waiter.paused(timeout=20)
    assert waiter.wait_step("launch")["ret"] == 0
    assert holder.pid not in again.holders(), "the idle holder asked for nothing"
    holder.resume()
    waiter.resume()
    assert holder.finish() == 0 and waiter.finish() == 0
