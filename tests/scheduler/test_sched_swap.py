"""Swapping through the real daemon (docs/protocol.md "The lock", EVICT and RESIDENCY): the memory
of idle clients that offered SWAP counts against the capacity, room for a waiter is taken from them
first with EVICT, and what they answer (RESIDENCY) shows in status, the log and the metrics.

The policy's choices are unit-tested with the policy; these check what goes on the wire and what
the shell keeps and shows. Capacity 10 GiB: a budget of 9.5 GiB, and every client counts 768 MiB
for its context beside its footprint.
"""

import os

import pytest

from sched_harness import FakeClient, GiB, registered, uuid
from testkit.waiting import poll
from test_metrics import free_port, scrape, value
from xpushare.wire.protocol import (
    DROP_EVICT, FEATURE_SWAP, GRANT_PREFETCH, HELLO_SWAP, RESIDENCY_ANSWER, RESIDENCY_REFUSED, EVICT_ROOM,
    MessageType,
)

CAPACITY = ["--no-nvml", "--gpu-memory", "10GiB", "--tq", "30"]


def _client(sock, managed, swap=True):
    c = registered(sock, flags=HELLO_SWAP if swap else 0)
    c.mem_update(0, managed, 0)
    return c


def _idle_after_a_turn(sock, managed, swap=True):
    """A client that held the GPU and released it (idle): its memory stays on the GPU."""
    c = _client(sock, managed, swap)
    c.request()
    c.expect(MessageType.LOCK_OK)
    c.release(reason=1)
    return c


def _me(status, client) -> dict:
    return next(c for c in status["clients"] if c["client_id"] == client.client_id)


def test_welcome_offers_swap_and_the_log_says_who_offered_it(start_scheduler):
    s = start_scheduler(*CAPACITY)
    with FakeClient(s.sock) as a, FakeClient(s.sock) as b:
        assert a.hello(flags=HELLO_SWAP).features & FEATURE_SWAP
        assert b.hello().features & FEATURE_SWAP  # what the scheduler takes, whoever asks
    # They attached nothing: who each one was is said in its disconnect's line, A's with swap
    gone = f"disconnect pid={os.getpid()} uid="
    poll(lambda: s.log().count(gone) == 2, what="both disconnects")
    assert [" swap, " in line for line in s.log().splitlines() if gone in line].count(True) == 1


def test_room_for_a_waiter_comes_from_an_idle_client_that_answers_evict(start_scheduler):
    port = free_port()
    s = start_scheduler(*CAPACITY, "--metrics-port", port, "--metrics-address", "127.0.0.1",
                        "--metrics-max-age", "0")
    a = _idle_after_a_turn(s.sock, 5 * GiB)
    b = _client(s.sock, 4 * GiB)
    b.request()  # 4.75 GiB beside A's 5 GiB still on the GPU: 9.75 > 9.5
    evict = a.expect(MessageType.EVICT)
    assert (evict.device, evict.reason) == (0, EVICT_ROOM)
    assert b.nothing_sent()  # not granted before A answers
    st = b.ctl("status")
    assert _me(st, a)["gpus"][0]["reclaiming"] is True
    assert _me(st, a)["gpus"][0]["state"] == "idle"
    (gpu,) = st["gpus"]
    assert gpu["reclaiming"] == [os.getpid()] and gpu["reclaims"] == 1
    assert gpu["resident_bytes"] == 5 * GiB and gpu["swapped_bytes"] == 0
    assert "reclaim pid=" in s.wait_log("reclaim pid=")
    assert f"reclaim pid={os.getpid()} gpu={uuid(0)} resident=5.00 GiB" in s.log()

    a.residency(flags=RESIDENCY_ANSWER, resident=0, host=5 * GiB, move_us=120_000)
    assert b.expect(MessageType.LOCK_OK).flags == 0
    st = a.ctl("status")
    mine = _me(st, a)["gpus"][0]
    assert (mine["resident_bytes"], mine["swapped_bytes"], mine["reclaiming"]) == (0, 5 * GiB, False)
    assert mine["swap_out_seconds"] == pytest.approx(0.12) and mine["swap_in_seconds"] is None
    assert mine["swap_refused"] is False
    (gpu,) = st["gpus"]
    assert (gpu["resident_bytes"], gpu["swapped_bytes"], gpu["reclaiming"]) == (4 * GiB, 5 * GiB, [])
    assert gpu["last_switch"]["swap_out"] == pytest.approx(0.12)
    assert gpu["last_switch"]["drain"] is None and gpu["last_switch"]["swap_in"] is None

    m = scrape(port)
    labels = {"gpu": "", "uuid": uuid(0)}
    assert value(m, "xpushare_client_gpu_swapped_bytes", client=str(a.client_id)) == 5 * GiB
    assert value(m, "xpushare_client_gpu_resident_bytes", client=str(a.client_id)) == 0
    assert value(m, "xpushare_client_gpu_resident_bytes", client=str(b.client_id)) == 4 * GiB
    assert value(m, "xpushare_gpu_resident_bytes", **labels) == 4 * GiB
    assert value(m, "xpushare_gpu_swapped_bytes", **labels) == 5 * GiB
    assert value(m, "xpushare_gpu_reclaims_total", **labels) == 1
    assert value(m, "xpushare_gpu_switch_seconds_count", **labels, phase="swap_out") == 1
    assert value(m, "xpushare_gpu_switch_seconds_sum", **labels, phase="swap_out") == \
        pytest.approx(0.12)
    assert value(m, "xpushare_gpu_switch_seconds_count", **labels, phase="swap_in") == 0

    # B goes idle; A asks again and does not fit beside B's memory: B is asked for the room, and A
    # comes back with PREFETCH and reports its swap-in.
    b.release(reason=1)
    a.request()
    assert b.expect(MessageType.EVICT).reason == EVICT_ROOM
    assert a.nothing_sent()
    b.residency(flags=RESIDENCY_ANSWER, resident=0, host=4 * GiB, move_us=90_000)
    assert a.expect(MessageType.LOCK_OK).flags == GRANT_PREFETCH
    a.residency(resident=5 * GiB, host=0, move_us=80_000)
    st = a.ctl("status")
    mine = _me(st, a)["gpus"][0]
    assert (mine["state"], mine["resident_bytes"], mine["swapped_bytes"]) == \
        ("holding", 5 * GiB, 0)
    assert mine["swap_in_seconds"] == pytest.approx(0.08)
    assert mine["swap_out_seconds"] == pytest.approx(0.12)  # the last of each is kept
    (gpu,) = st["gpus"]
    assert (gpu["resident_bytes"], gpu["swapped_bytes"], gpu["reclaims"]) == (5 * GiB, 4 * GiB, 2)
    last = gpu["last_switch"]  # a new switch: B's swap-out and A's swap-in
    assert (last["swap_out"], last["swap_in"]) == (pytest.approx(0.09), pytest.approx(0.08))
    m = scrape(port)
    assert value(m, "xpushare_gpu_switch_seconds_count", **labels, phase="swap_in") == 1
    assert value(m, "xpushare_gpu_reclaims_total", **labels) == 2


def test_a_refused_answer_is_logged_and_the_waiter_is_served_without_that_room(start_scheduler):
    s = start_scheduler(*CAPACITY)
    a = _idle_after_a_turn(s.sock, 5 * GiB)
    b = _client(s.sock, 4 * GiB)
    b.request()
    a.expect(MessageType.EVICT)
    assert b.nothing_sent()
    # A's host memory for swap ran out: all of it stays on the GPU.
    a.residency(flags=RESIDENCY_ANSWER | RESIDENCY_REFUSED, resident=5 * GiB, host=0)
    # Nobody holds the GPU and nobody else can give room: B runs alone, as before swapping.
    b.expect(MessageType.LOCK_OK)
    log = s.wait_log("could not move its memory off the GPU")
    assert f"pid={os.getpid()} gpu={uuid(0)} could not move its memory off the GPU" in log
    assert "a waiter gets no room from it" in log
    assert "WARNING" in next(line for line in log.splitlines() if "could not move its memory" in line)
    mine = _me(a.ctl("status"), a)["gpus"][0]
    assert (mine["swap_refused"], mine["reclaiming"], mine["swapped_bytes"]) == (True, False, 0)
    assert mine["resident_bytes"] == 5 * GiB
    # The same report again is not logged again at once (rate-limited per client).
    a.residency(flags=RESIDENCY_REFUSED, resident=5 * GiB, host=0)
    a.ctl("status")
    assert s.log().count("could not move its memory off the GPU") == 1


def test_residency_needs_hello_and_an_attached_device(start_scheduler):
    s = start_scheduler(*CAPACITY)
    with registered(s.sock, flags=HELLO_SWAP) as a:
        a.residency(device=5, resident=GiB)
        assert "not attached" in a.expect(MessageType.ERROR)
        a.request(0)  # the connection is kept
        a.expect(MessageType.LOCK_OK)
    with FakeClient(s.sock) as early:
        early.residency()
        assert "HELLO must come first" in early.expect(MessageType.ERROR)
        assert early.closed_by_peer()


def test_a_client_without_swap_is_never_sent_evict(start_scheduler):
    s = start_scheduler(*CAPACITY)
    a = _idle_after_a_turn(s.sock, 5 * GiB, swap=False)
    b = _client(s.sock, 4 * GiB)
    b.request()
    # A idle counts nothing (it cannot be asked to move): B runs beside its memory at once.
    b.expect(MessageType.LOCK_OK)
    assert a.nothing_sent()
    st = b.ctl("status")
    assert _me(st, a)["gpus"][0]["resident_bytes"] == 0
    assert st["gpus"][0]["reclaims"] == 0 and st["gpus"][0]["resident_bytes"] == 4 * GiB


def test_a_client_that_never_answers_evict_is_evicted_and_the_log_says_so(start_scheduler):
    s = start_scheduler("--no-nvml", "--gpu-memory", "10GiB", "--tq", "0.5")
    a = _idle_after_a_turn(s.sock, 5 * GiB)
    b = _client(s.sock, 4 * GiB)
    b.request()
    a.expect(MessageType.EVICT)
    # A stays silent: two quanta later it is told why and its connection is closed.
    assert "no RESIDENCY" in a.expect(MessageType.ERROR, timeout=10)
    assert a.closed_by_peer()
    b.expect(MessageType.LOCK_OK, timeout=5)
    log = s.wait_log("did not answer EVICT")
    assert f"evict pid={os.getpid()} gpu={uuid(0)} after " in log
    assert "without LOCK_RELEASED" not in log


def test_a_holder_dropped_for_a_waiter_is_told_how_much_room_to_make(start_scheduler):
    s = start_scheduler("--no-nvml", "--gpu-memory", "10GiB", "--tq", "0.3", "--mode", "serial")
    h = _client(s.sock, 6 * GiB)
    h.request()
    h.expect(MessageType.LOCK_OK)
    w = _client(s.sock, 4 * GiB)
    w.request()
    # the budget's 9.5 GiB less the waiter's 4 GiB and its context's 768 MiB: 4.75 GiB may stay
    drop = h.expect(MessageType.DROP_LOCK)
    assert (drop.flags & DROP_EVICT, drop.evict_mib) == (DROP_EVICT, 1280)
    assert "evict=yes room=1280MiB" in s.wait_log("room=1280MiB")
    h.residency(resident=int(4.75 * GiB), host=int(1.25 * GiB))
    h.release(reason=1)
    assert w.expect(MessageType.LOCK_OK)
    st = w.ctl("status")
    assert _me(st, h)["gpus"][0]["resident_bytes"] == int(4.75 * GiB)
