"""Distributed jobs that take turns (issue 12): two 2-rank jobs, rank r of each on GPU r, every step
ending in a collective (the mock's: it ends only when both ranks of the job launched it), under
the library and the real scheduler in serial mode.

Without knowing which processes form a job, the scheduler grants each GPU's lock on its own. Job
A's rank 0 may then hold GPU 0 while job B's rank 1 holds GPU 1: each one's collective waits for a
peer that waits for the other GPU, the drain at the end of the quantum never finishes, and the
silent holder is evicted two quanta after DROP_LOCK. The tests force that interleaving: A0 and
B1 start first and get their GPUs, A1 and B0 come after.

With the job identity the library reads from the torch environment (WORLD_SIZE, RANK, ...,
TORCHELASTIC_RUN_ID), gang scheduling grants a job's locks on all its GPUs together, and both
jobs finish without an eviction.
"""

import json
import time

import pytest

from .harness import poll, uuid_of

TQ = 0.2          # seconds: a short quantum, so the jobs take turns and an eviction comes soon
STEPS = 30        # per rank; 3 kernels and a collective of 3 ms each: > one quantum of GPU time
KERNELS = 3
KERNEL_US = 3000
DEADLINE = 40.0   # seconds for the whole run (test B stops at the first eviction)


def _events(sched) -> list[dict]:
    """The scheduler's log (--log-format json), one dict per line, in order."""
    out = []
    for line in sched.log().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _torch_env(job: str, port: int, rank: int) -> dict:
    return {"TORCHELASTIC_RUN_ID": job, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
            "WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2, "RANK": rank, "LOCAL_RANK": rank}


def _rank(world, job: str, rank: int, identity: dict | None = None):
    env = {"MOCK_CUDA_DEVICES": 2, "MOCK_CUDA_KERNEL_US": KERNEL_US,
           "MOCK_CUDA_COLLECTIVE_DIR": world.dir / f"job{job}", **(identity or {})}
    return world.app("init", "ctx", rank, "stream", "collective", STEPS, KERNELS, env=env)


def _start_crossed(world, sched, identities=None, wait_grants=True):
    """A0 and B1 first (each alone on its GPU), then A1 and B0. Returns {"A0": app, ...}."""
    ids = identities or {}
    apps = {"A0": _rank(world, "A", 0, ids.get("A0")), "B1": _rank(world, "B", 1, ids.get("B1"))}
    if wait_grants:
        sched.wait_holder(apps["A0"].pid, uuid_of(0))
        sched.wait_holder(apps["B1"].pid, uuid_of(1))
    else:
        poll(lambda: {apps["A0"].pid, apps["B1"].pid} <= sched.client_pids(), what="A0 and B1")
    apps["A1"] = _rank(world, "A", 1, ids.get("A1"))
    apps["B0"] = _rank(world, "B", 0, ids.get("B0"))
    return apps


def _kill(apps):
    for a in apps.values():
        a.kill()


def _scheduler(world):
    return world.scheduler(mode="serial", tq=TQ, extra_args=["--log-locks", "--log-format", "json"])


def test_without_job_identity_two_jobs_deadlock(world):
    sched = _scheduler(world)
    apps = _start_crossed(world, sched)
    try:
        evict = poll(lambda: next((e for e in _events(sched) if e.get("event") == "evict"), None),
                     timeout=DEADLINE, what="an eviction")
    finally:
        _kill(apps)
    pid = {a.pid: name for name, a in apps.items()}
    events = _events(sched)
    before = events[:events.index(evict)]
    lock_events = [(e["event"], pid.get(e["pid"])) for e in before
                   if e.get("event") in ("grant", "drop", "release")]
    # the crossed grants came first, and the peers never held their GPU before the eviction
    assert sorted(lock_events[:2]) == [("grant", "A0"), ("grant", "B1")], lock_events
    assert not [x for x in lock_events if x[0] == "grant" and x[1] in ("A1", "B0")], lock_events
    # the evicted one is a crossed holder, told to drop, that never released: its drain waited on
    # a collective whose peer was gated on the other GPU
    victim = pid.get(evict["pid"])
    assert victim in ("A0", "B1"), evict
    assert ("drop", victim) in lock_events and ("release", victim) not in lock_events, lock_events


def test_with_job_identity_both_jobs_finish(world):
    sched = _scheduler(world)
    identities = {"A0": _torch_env("jobA", 29500, 0), "A1": _torch_env("jobA", 29500, 1),
                  "B0": _torch_env("jobB", 29501, 0), "B1": _torch_env("jobB", 29501, 1)}
    apps = _start_crossed(world, sched, identities, wait_grants=False)
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            if all(a.has_step("done") for a in apps.values()):
                break
            if any(e.get("event") == "evict" for e in _events(sched)):
                break  # the deadlock: no need to wait out the deadline
            time.sleep(0.1)
        done = {name: a.has_step("done", steps=STEPS) for name, a in apps.items()}
        evictions = [e for e in _events(sched) if e.get("event") == "evict"]
    finally:
        _kill(apps)
    assert evictions == [], evictions
    assert done == dict.fromkeys(apps, True), done
