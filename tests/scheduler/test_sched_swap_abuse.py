"""Clients that play the EVICT/RESIDENCY exchange against the others, through the real daemon
(issue 33, items 1 and 2; policy/backoff.py): residency is granted by the scheduler, never declared
by a client; a loop of slow answers ends; what a report claims is cut to what the client
allocated; reclaim lines count against the uid's log budget.

Capacity 10 GiB (a budget of 9.5 GiB; every client counts 768 MiB for its context beside its
footprint), --tq 1 so that "late" (more than a quantum) and "silent" (two) come soon.
"""

import os
import time

import pytest

from sched_harness import ConnectedAs, FakeClient, GiB, registered
from testkit.waiting import poll
from xpushare.wire.protocol import HELLO_SWAP, RESIDENCY_ANSWER, MessageType

CAPACITY = ["--no-nvml", "--gpu-memory", "10GiB", "--tq", "1"]
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _swapper(c: FakeClient, managed: int) -> FakeClient:
    c.hello(flags=HELLO_SWAP)
    c.attach(0)
    c.mem_update(0, managed, 0)
    return c


def _turn(c: FakeClient) -> None:
    """Hold the GPU once and give it back: its bytes stay on the GPU (granted residency)."""
    c.request()
    c.expect(MessageType.LOCK_OK)
    c.release(reason=1)


def _waiter(sock, managed: int) -> FakeClient:
    c = registered(sock)
    c.mem_update(0, managed, 0)
    return c


def test_an_unsolicited_report_does_not_park_bytes_again(start_scheduler):
    s = start_scheduler(*CAPACITY)
    a = _swapper(FakeClient(s.sock), 5 * GiB)
    _turn(a)
    b = _waiter(s.sock, 4 * GiB)
    b.request()                                     # 4.75 beside A's 5: A is asked
    a.expect(MessageType.EVICT)
    a.residency(flags=RESIDENCY_ANSWER, resident=0, host=5 * GiB)
    b.expect(MessageType.LOCK_OK)
    a.residency(flags=0, resident=5 * GiB, host=0)  # "all of it is back": no grant said so
    a.ctl("status")                                 # A's report is handled before B's release
    b.release()
    b.request()
    assert b.expect(MessageType.LOCK_OK)            # granted at once ...
    assert a.nothing_sent()                         # ... and A was not asked again
    gpu = a.ctl("status")["gpus"][0]
    assert gpu["resident_bytes"] == 4 * GiB and gpu["reclaims"] == 1


@needs_root
def test_an_evict_answered_late_costs_the_uid_its_idle_residency(start_scheduler):
    s = start_scheduler(*CAPACITY)
    with ConnectedAs(NOBODY, NOBODY, s.sock) as (a,):
        _swapper(a, 5 * GiB)
        _turn(a)
        b = _waiter(s.sock, 4 * GiB)
        b.request()
        a.expect(MessageType.EVICT)
        time.sleep(1.3)                              # more than a quantum
        a.residency(flags=RESIDENCY_ANSWER, resident=0, host=5 * GiB)
        b.expect(MessageType.LOCK_OK)
        s.wait_log("kept a waiter waiting")
        assert f"uid={NOBODY} gpu=" in s.log() and "is not counted for 4s" in s.log()
        b.release()
        _turn(a)                                     # a grant: its bytes would stay, but ...
        b.request()
        assert b.expect(MessageType.LOCK_OK)         # ... they are not counted: B runs at once
        assert a.nothing_sent()


@needs_root
def test_a_silent_client_that_reconnects_makes_nobody_wait_again(start_scheduler):
    s = start_scheduler(*CAPACITY)
    b = _waiter(s.sock, 4 * GiB)
    with ConnectedAs(NOBODY, NOBODY, s.sock, n=2) as (a, again):
        _swapper(a, 5 * GiB)
        _turn(a)
        b.request()
        a.expect(MessageType.EVICT)                  # never answered: closed after two quanta
        assert a.closed_by_peer(timeout=5)
        b.expect(MessageType.LOCK_OK)
        b.release()
        _swapper(again, 5 * GiB)                     # the same uid, a new connection
        _turn(again)
        b.request()
        assert b.expect(MessageType.LOCK_OK)         # its idle bytes count no more: no EVICT
        assert again.nothing_sent()


def test_a_dropped_holder_that_says_it_kept_everything_is_counted_for_what_it_was_asked_to_keep(
        start_scheduler):
    s = start_scheduler(*CAPACITY)
    h = _swapper(FakeClient(s.sock), 6 * GiB)
    h.request()
    h.expect(MessageType.LOCK_OK)
    w = _waiter(s.sock, 4 * GiB)
    w.request()                                      # 4.75 + 6.75 > 9.5: H's turn ends in 1 s
    drop = h.expect(MessageType.DROP_LOCK, timeout=5)
    assert drop.evict_mib                            # only part of it must go
    h.residency(flags=0, resident=6 * GiB, host=0)   # "I kept it all"
    h.release()
    w.expect(MessageType.LOCK_OK)
    mine = next(c for c in w.ctl("status")["clients"] if c["client_id"] == h.client_id)
    assert mine["gpus"][0]["resident_bytes"] == 6 * GiB - drop.evict_mib * (1 << 20)
    w.release()
    w.request()
    assert w.expect(MessageType.LOCK_OK)             # what H was let keep fits beside W
    assert h.nothing_sent()


def test_swapped_bytes_are_cut_to_what_the_clients_allocated(start_scheduler):
    """Three clients claiming 2**65 bytes allocated and 16 EiB swapped made the GPU's swapped bytes
    48 EiB on a 10 GiB GPU."""
    s = start_scheduler(*CAPACITY)
    u64 = 2**64 - 1
    liars = [_swapper(FakeClient(s.sock), 0) for _ in range(3)]
    for c in liars:
        c.mem_update(0, u64, u64)
        c.residency(flags=0, resident=u64, host=u64)
    honest = _swapper(FakeClient(s.sock), 2 * GiB)
    honest.residency(flags=0, resident=2 * GiB, host=2 * GiB)   # all on the GPU: none swapped
    st = honest.ctl("status")
    host_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert st["gpus"][0]["swapped_bytes"] <= host_memory
    mine = next(c for c in st["clients"] if c["client_id"] == honest.client_id)
    assert mine["gpus"][0]["swapped_bytes"] == 0
    for c in st["clients"]:
        assert c["gpus"][0]["swapped_bytes"] <= host_memory


@needs_root
def test_reclaim_lines_count_against_the_uid_log_budget(start_scheduler):
    s = start_scheduler(*CAPACITY, "--client-log-limit", "3/2")
    b = _waiter(s.sock, 4 * GiB)
    rounds = 12
    with ConnectedAs(NOBODY, NOBODY, s.sock) as (a,):
        _swapper(a, 5 * GiB)
        for _ in range(rounds):                      # a turn, then its bytes are asked for
            _turn(a)
            b.request()
            a.expect(MessageType.EVICT)
            a.residency(flags=RESIDENCY_ANSWER, resident=0, host=5 * GiB)
            b.expect(MessageType.LOCK_OK)
            b.release()
        a.ctl("status")
    gpu = b.ctl("status")["gpus"][0]
    assert gpu["reclaims"] == rounds
    poll(lambda: "suppressed" in s.log(), what="the suppressed lines' count", timeout=10)
    assert s.log().count("reclaim pid=") < rounds
