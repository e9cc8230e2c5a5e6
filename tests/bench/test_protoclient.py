"""bench/core/protoclient.py against a real nvshare-scheduler subprocess (no GPU)."""

from __future__ import annotations

import pytest

from bench.core.protoclient import GIB, ProtoClient, ProtocolFailure, client_gpus, ctl, footprint, prefetch_requested
from testkit.waiting import poll
from xpushare.wire.protocol import DropReason

UUID = "GPU-00000000-0000-0000-0000-0000000000b1"


def test_hello_attach_and_status(start_scheduler):
    sched = start_scheduler("serial", 30.0, "--gpu-memory", "8GiB")
    with ProtoClient(sched.socket, priority=7) as c:
        assert c.client_id > 0
        attached = c.attach(UUID, device=0, capacity=16 * GIB)
        assert attached.device == 0
        assert attached.capacity == 8 * GIB  # the scheduler's own setting wins
        c.mem_update(3 * GIB, 1 * GIB)
        status = poll(lambda: (s := ctl(sched.socket, "status")) and
                            any(footprint(g) == 4 * GIB for g in client_gpus(s, c_pid(s, c.client_id))) and s)
        me = next(x for x in status["clients"] if x["client_id"] == c.client_id)
        assert me["priority"] == 7
        assert me["gpus"][0]["uuid"] == UUID


def c_pid(status: dict, client_id: int) -> int:
    return next(x["pid"] for x in status["clients"] if x["client_id"] == client_id)


def test_lock_release_cycles(start_scheduler):
    sched = start_scheduler("serial", 30.0)
    with ProtoClient(sched.socket) as c:
        c.attach(UUID)
        for _ in range(3):
            grant = c.lock(prefix=c.mem_update_frame(GIB))
            assert grant.device == 0
            assert grant.quantum_ms == 30_000
            assert not prefetch_requested(grant)  # never evicted
            assert c.held
            c.release()
            assert not c.held


def test_waiter_is_granted_only_after_the_release(start_scheduler):
    sched = start_scheduler("serial", 30.0)
    with ProtoClient(sched.socket) as a, ProtoClient(sched.socket) as b:
        for c in (a, b):
            c.attach(UUID)
            c.mem_update(GIB)
        a.lock()
        b.request()
        with pytest.raises(TimeoutError):
            b.wait_grant(timeout=0.5)
        a.release()
        assert b.wait_grant(timeout=10).device == 0


def test_higher_priority_preempts_the_holder(start_scheduler):
    sched = start_scheduler("serial", 60.0)
    with ProtoClient(sched.socket, priority=0) as low, ProtoClient(sched.socket, priority=10) as high:
        for c in (low, high):
            c.attach(UUID)
            c.mem_update(GIB)
        low.lock()
        high.request()
        drop = low.wait_drop(timeout=10)
        assert drop.reason == DropReason.PREEMPTED
        low.release()
        assert high.wait_grant(timeout=10).device == 0


def test_request_for_a_device_never_attached_is_an_error(start_scheduler):
    sched = start_scheduler("serial", 30.0)
    with ProtoClient(sched.socket) as c:
        c.request()
        with pytest.raises(ProtocolFailure, match="not attached"):
            c.wait_grant(timeout=10)


def test_ctl_ping(start_scheduler):
    sched = start_scheduler("serial", 30.0)
    assert ctl(sched.socket, "ping")["ok"] is True
