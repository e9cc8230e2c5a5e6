"""Auto mode, priorities and the dynamic quantum through the real daemon: what goes on the wire.

The policy's rules are unit-tested in test_policy_*.py; these check that footprints (MEM_UPDATE),
capacity (--gpu-memory), priorities (HELLO, set_priority) reach it, and that its decisions leave as
LOCK_OK/DROP_LOCK with the PREFETCH/EVICT flags, with LOCK_RELEASED's measurements coming back.
"""

import os

from xpushare.wire.protocol import DROP_EVICT, GRANT_PREFETCH, DropReason, MessageType

from sched_harness import FakeClient, GiB, registered

CAPACITY = ["--no-nvml", "--gpu-memory", "10GiB"]  # budget 9.5 GiB; each client counts +768 MiB


def _holding(sock, managed, **hello):
    c = registered(sock, **hello)
    c.mem_update(0, managed, 0)
    c.request()
    return c


def test_auto_is_the_default_and_runs_fitting_clients_together(start_scheduler):
    s = start_scheduler(*CAPACITY, "--tq", "30")
    a = _holding(s.sock, 3 * GiB)
    grant = a.expect(MessageType.LOCK_OK)
    assert (grant.quantum_ms, grant.flags) == (30_000, 0)
    b = _holding(s.sock, 3 * GiB)
    assert b.expect(MessageType.LOCK_OK).flags == 0  # 2 x 3.75 GiB fit in 9.5 GiB
    c = _holding(s.sock, 4 * GiB)
    # 12.25 GiB would not fit: C waits, nobody is dropped before a quantum (C's request was handled
    # before its round trip, so before A's and B's)
    assert c.nothing_sent()
    assert a.nothing_sent() and b.nothing_sent()
    (gpu,) = s.status()["gpus"]
    assert (gpu["mode"], gpu["operation"]) == ("auto", "concurrent")
    assert gpu["blocked"] == [os.getpid()] and gpu["budget"] == int(9.5 * GiB)
    assert "fit" in gpu["why"]
    b.release()  # room again: C runs beside A
    assert c.expect(MessageType.LOCK_OK).flags == 0


def test_a_higher_priority_request_preempts_with_evict_and_the_victim_comes_back_with_prefetch(
        start_scheduler):
    s = start_scheduler(*CAPACITY, "--tq", "30")
    a = _holding(s.sock, 3 * GiB)
    a.expect(MessageType.LOCK_OK)
    b = _holding(s.sock, 3 * GiB)
    b.expect(MessageType.LOCK_OK)
    c = _holding(s.sock, 4 * GiB, priority=5)
    drop = b.expect(MessageType.DROP_LOCK)  # the newest of the lower-priority holders
    assert (drop.reason, drop.flags) == (DropReason.PREEMPTED, DROP_EVICT)
    assert a.nothing_sent()  # dropping B alone makes room for C
    b.release(drain_us=20_000, evict_us=150_000)
    assert c.expect(MessageType.LOCK_OK).flags == 0
    b.request()
    assert b.nothing_sent()
    c.release(reason=1)  # idle
    assert b.expect(MessageType.LOCK_OK).flags == GRANT_PREFETCH
    log = s.wait_log("release pid=")
    assert "reason=preempted evict=yes" in log and "evict=150.0ms" in log
    assert "prefetch=yes" in s.wait_log("prefetch=yes")


def test_growth_past_capacity_drops_the_newest_holder_for_memory(start_scheduler):
    s = start_scheduler(*CAPACITY, "--tq", "30")
    a = _holding(s.sock, 2 * GiB)
    a.expect(MessageType.LOCK_OK)
    b = _holding(s.sock, 2 * GiB)
    b.expect(MessageType.LOCK_OK)
    a.mem_update(0, 7 * GiB, 0)  # 7.75 + 2.75 > 9.5
    drop = b.expect(MessageType.DROP_LOCK)
    assert (drop.reason, drop.flags) == (DropReason.MEMORY, DROP_EVICT)
    assert a.nothing_sent()
    b.release()
    b.request()
    assert b.nothing_sent()
    a.mem_update(0, 2 * GiB, 0)  # fits again: concurrency returns
    assert b.expect(MessageType.LOCK_OK).flags == GRANT_PREFETCH


def test_serial_mode_evicts_only_when_the_next_holder_needs_the_room(start_scheduler):
    s = start_scheduler(*CAPACITY, "--mode", "serial", "--tq", "0.3")
    a = _holding(s.sock, 2 * GiB)
    a.expect(MessageType.LOCK_OK)
    b = _holding(s.sock, 2 * GiB)
    assert a.expect(MessageType.DROP_LOCK, timeout=10).flags == 0  # both fit: just take turns
    a.release()
    b.expect(MessageType.LOCK_OK)
    a.mem_update(0, 8 * GiB, 0)
    a.request()
    assert b.expect(MessageType.DROP_LOCK, timeout=10).flags == DROP_EVICT


def test_dynamic_quantum_follows_measured_switches_and_an_explicit_one_overrides(start_scheduler):
    s = start_scheduler(*CAPACITY, "--mode", "serial")
    a = _holding(s.sock, 1 * GiB)
    assert a.expect(MessageType.LOCK_OK).quantum_ms == 5_000  # nothing measured yet
    with FakeClient(s.sock) as ctl:
        assert ctl.ctl("set_tq", seconds=1) == {"ok": True}
        b = _holding(s.sock, 1 * GiB)
        a.expect(MessageType.DROP_LOCK, timeout=10)
        a.release(drain_us=50_000)
        b.expect(MessageType.LOCK_OK)
        assert ctl.ctl("set_tq", seconds="auto") == {"ok": True}
        (gpu,) = ctl.ctl("status")["gpus"]
    assert gpu["tq_source"] == "dynamic" and gpu["switch_cost"] > 0
    assert 2.0 <= gpu["tq"] <= 120.0


def test_set_priority_validates_and_applies(start_scheduler):
    s = start_scheduler(*CAPACITY)
    a = registered(s.sock)
    with FakeClient(s.sock) as ctl:
        for bad in ({"priority": 1}, {"priority": "high", "pid": 1}, {"priority": 1001, "pid": 1},
                    {"priority": True, "pid": 1}, {"priority": 1, "pid": "me"}):
            r = ctl.ctl("set_priority", **bad)
            assert not r["ok"], bad
        assert "no client with client_id 999" in ctl.ctl("set_priority", priority=1,
                                                         client_id=999)["error"]
        assert ctl.ctl("set_priority", priority=-4, client_id=a.client_id) == {"ok": True,
                                                                              "clients": 1}
        (client,) = ctl.ctl("status")["clients"]
    assert client["priority"] == -4
    assert "priority pid=" in s.wait_log("priority pid=")
