"""Residency (policy/residency.py): idle clients that answer EVICT keep their memory on the GPU and
are counted; a waiter that does not fit beside them gets room from them first (Reclaim), lower
priority then least recently used, as few as needed, and runs once they answered. Scripted replays,
time injected; 16 GiB, no reserve, no context overhead, so sizes read directly.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    EVICT_AFTER_QUANTA, Arbiter, Backoff, Drop, Evict, Grant, Mode, Reclaim,
)
from xpushare.scheduler.policy.backoff import BACKOFF_QUANTA

from test_policy_replay import GiB, Replay, play

TQ = 10.0
Q = DropReason.QUANTUM


def swap(mode=Mode.AUTO, capacity=16, swappable="ABCHW", **sizes_gib):
    """A Replay of an arbiter whose clients in `swappable` answer EVICT, with footprints."""
    r = Replay(Arbiter(mode, TQ, capacity=capacity * GiB, reserve=0, client_overhead=0))
    for c in swappable:
        r(0, "set_swappable", c, True)
    for c, size in sizes_gib.items():
        r(0, "set_footprint", c, int(size * GiB))
    return r


def park(r, now, *clients):
    """Each client runs alone in turn and releases: its memory stays on the GPU."""
    for c in clients:
        assert r(now, "request", c) == [Grant(c, TQ)]
        assert r(now + 0.5, "release", c) == []
        now += 1
    return now


def resident_gib(r, *clients):
    return [r.arb.resident_bytes(c) / GiB for c in clients]


# -- who is asked, and when the waiter runs ----------------------------------------------------
@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
@pytest.mark.parametrize("need, priorities, asked", [
    (4, {}, []),                            # 4 + 12 fits: granted at once
    (8, {}, ["A"]),                         # 4 GiB short: the least recently used
    (12, {}, ["A", "B"]),
    (16, {}, ["A", "B", "C"]),
    (8, {"A": 1}, ["B"]),                   # lower priority first ...
    (12, {"A": 1, "C": -1}, ["C", "B"]),    # ... then least recently used
    (16, {"B": 2, "C": 2}, ["A", "B", "C"]),
])
def test_idle_clients_are_asked_lower_priority_first_then_least_recently_used(
        mode, need, priorities, asked):
    r = swap(mode, A=4, B=4, C=4, W=need)
    now = park(r, 0, "A", "B", "C")
    for c, p in priorities.items():
        r(now, "set_priority", c, p)
    assert r.arb.resident_total() == 12 * GiB
    if not asked:
        assert r(now, "request", "W") == [Grant("W", TQ)]
        return
    assert r(now, "request", "W") == [Reclaim(c) for c in asked]
    assert [c for c in "ABC" if r.arb.is_reclaiming(c)] == sorted(asked)
    assert r.arb.snapshot(now).reclaiming == tuple(asked)
    for c in reversed(asked[1:]):            # the waiter runs only once all have answered
        assert r(now + 1, "residency", c, 0) == []
    assert r(now + 2, "residency", asked[0], 0) == [Grant("W", TQ)]
    assert r.arb.resident_total() == (12 - 4 * len(asked) + need) * GiB
    # Those moved out bring their memory back in bulk at their next grant.
    assert r(now + 3, "release", "W") == []
    assert r(now + 4, "residency", "W", 0) == []   # W leaves the room for them
    for c in asked:
        assert r(now + 5, "request", c) == [Grant(c, TQ, prefetch=True)]
        r(now + 6, "release", c)
        r(now + 7, "residency", c, 0)


def test_reclaims_in_flight_count_and_nobody_is_asked_twice():
    r = swap(A=4, B=4, C=4, W=8)
    now = park(r, 0, "A", "B", "C")
    assert r(now, "request", "W") == [Reclaim("A")]
    assert r(now + 1, "tick") == []                          # A's answer is still coming
    assert r(now + 2, "set_footprint", "W", 12 * GiB) == [Reclaim("B")]  # 4 GiB more
    assert r(now + 3, "set_footprint", "W", 10 * GiB) == []
    play(r, [(now + 4, "residency", "B", 0, []),
             (now + 5, "residency", "A", 0, [Grant("W", TQ)])])


def test_running_holders_are_not_dropped_while_idle_clients_can_make_room():
    r = swap(A=8, H=8, W=8)
    play(r, [(0, "request", "A", [Grant("A", TQ)]),
             (1, "release", "A", []),
             (2, "request", "H", [Grant("H", TQ)]),       # 8 + 8 fit
             (3, "request", "W", [Reclaim("A")]),         # 24: A makes room, H runs on
             (TQ + 3, "tick", []),                         # H's quantum ends: not dropped
             # W runs beside H; A answered more than a quantum late: a strike (backoff.py)
             (TQ + 4, "residency", "A", 0, [Backoff("A", TQ + 1, BACKOFF_QUANTA * TQ),
                                            Grant("W", TQ)])])
    assert r.arb.live_holders() == ["H", "W"]


def test_when_idle_clients_cannot_make_room_all_are_asked_and_holders_drop_as_before():
    r = swap(A=4, H=8, W=10)
    play(r, [(0, "request", "A", [Grant("A", TQ)]),
             (1, "release", "A", []),
             (2, "request", "H", [Grant("H", TQ)]),
             (3, "request", "W", [Reclaim("A")]),          # 8 + 10 + 4: even without A, 18
             (TQ + 2, "tick", [Drop("H", Q, evict=True)]),  # H's turn ends: as without swap
             (TQ + 2.5, "residency", "H", 0, []),           # it moved all of it
             (TQ + 3, "release", "H", [Grant("W", TQ)]),    # 10 + A's 4 fit: no need to wait
             (TQ + 4, "residency", "A", 0, [Backoff("A", TQ + 1, BACKOFF_QUANTA * TQ)])])


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_a_waiter_that_fits_nowhere_runs_alone_only_once_nothing_is_being_reclaimed(mode):
    r = swap(mode, A=4, B=4, W=20)
    now = park(r, 0, "A", "B")
    play(r, [(now, "request", "W", [Reclaim("A"), Reclaim("B")]),
             (now + 1, "residency", "A", 0, []),
             (now + 2, "residency", "B", 0, [Grant("W", TQ)])])
    assert r.arb.resident_total() == 20 * GiB


def test_a_lone_request_beside_idle_memory_does_not_take_the_fast_path():
    r = swap(A=8, W=12)
    park(r, 0, "A")
    assert r(5, "request", "W") == [Reclaim("A")]
    assert r.arb.state_of("W") == "waiting"


# -- clients that do not answer EVICT ----------------------------------------------------------
@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_idle_clients_that_do_not_answer_evict_are_neither_counted_nor_reclaimed(mode):
    r = swap(mode, swappable="", A=4, B=4, C=4, W=16)
    now = park(r, 0, "A", "B", "C")
    assert r.arb.resident_total() == 0 and resident_gib(r, "A", "B", "C") == [0, 0, 0]
    assert r(now, "request", "W") == [Grant("W", TQ)]   # as before residency existed
    mixed = swap(mode, swappable="B", A=4, B=4, C=4, W=16)
    now = park(mixed, 0, "A", "B", "C")
    assert resident_gib(mixed, "A", "B", "C") == [0, 4, 0]
    play(mixed, [(now, "request", "W", [Reclaim("B")]),
                 (now + 1, "residency", "B", 0, [Grant("W", TQ)])])


def test_a_client_that_stops_answering_evict_is_no_longer_counted():
    r = swap(A=8, W=12)
    park(r, 0, "A")
    assert r(5, "request", "W") == [Reclaim("A")]
    assert r(6, "set_swappable", "A", False) == [Grant("W", TQ)]
    assert r.arb.resident_bytes("A") == 0 and not r.arb.is_reclaiming("A")


# -- silent, refused ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_a_reclaimed_client_that_never_answers_is_evicted(mode):
    r = swap(mode, A=8, W=12)
    park(r, 0, "A")
    assert r(5, "request", "W") == [Reclaim("A")]
    deadline = 5 + EVICT_AFTER_QUANTA * TQ
    assert r.arb.next_deadline() == deadline
    assert r(deadline - 0.01, "tick") == []
    assert r(deadline, "tick") == [Evict("A", EVICT_AFTER_QUANTA * TQ),
                                   Backoff("A", EVICT_AFTER_QUANTA * TQ, BACKOFF_QUANTA * TQ),
                                   Grant("W", TQ)]
    assert r.arb.resident_bytes("A") == 0 and r.arb.next_deadline() == deadline + TQ
    assert r(deadline, "disconnect", "A") == []   # the server closes its connection


def test_a_reclaimed_client_that_asks_meanwhile_waits_and_is_evicted_silent_too():
    r = swap(A=8, W=12)
    park(r, 0, "A")
    play(r, [(5, "request", "W", [Reclaim("A")]),
             (6, "request", "A", [])])                       # waits, its reclaim still on
    deadline = 5 + EVICT_AFTER_QUANTA * TQ
    assert r(deadline, "tick") == [Evict("A", deadline - 5),
                                   Backoff("A", deadline - 5, BACKOFF_QUANTA * TQ), Grant("W", TQ)]
    assert r.arb.state_of("A") == "idle"    # it keeps nothing: its connection closes


def test_a_reclaimed_client_that_asks_meanwhile_is_granted_with_prefetch_after_its_answer():
    r = swap(A=4, B=4, W=12)
    now = park(r, 0, "A", "B")
    play(r, [(now, "request", "W", [Reclaim("A")]),         # 12 + 8 > 16
             (now + 1, "request", "A", []),                 # it waits, as anyone would
             (now + 2, "residency", "A", 0, [Grant("W", TQ), Reclaim("B")]),  # A needs 4 more
             (now + 3, "residency", "B", 0, [Grant("A", TQ, prefetch=True)])])


def test_refused_falls_back_to_holders_dropping_and_is_not_asked_again_until_granted():
    r = swap(A=4, H=8, W=8, B=8)
    play(r, [(0, "request", "A", [Grant("A", TQ)]),
             (1, "release", "A", []),
             (2, "request", "H", [Grant("H", TQ)]),
             (3, "request", "W", [Reclaim("A")])])            # 8 + 8 + 4
    assert r(4, "residency", "A", 4 * GiB, refused=True) == []   # H keeps its turn: W waits
    assert not r.arb.is_reclaiming("A") and r.arb.resident_bytes("A") == 4 * GiB
    play(r, [(TQ + 2, "tick", [Drop("H", Q, evict=True)]),   # today's rule
             (TQ + 2.5, "residency", "H", 0, []),             # it moved all of it
             (TQ + 3, "release", "H", [Grant("W", TQ)]),      # 8 + A's 4 fit
             (TQ + 4, "request", "B", []),                    # 8 + 8 + 4: A is not asked
             (2 * TQ + 3, "tick", [Drop("W", Q, evict=True)]),
             (2 * TQ + 4, "release", "W", [Grant("B", TQ)]),
             (2 * TQ + 5, "request", "A", [Grant("A", TQ)]),  # 8 + 4: it fits where it is
             (2 * TQ + 6, "release", "A", []),
             (2 * TQ + 7, "request", "W", [Reclaim("A")])])   # granted since: asked again


def test_refused_in_serial_mode_lets_the_waiter_run_alone_as_before():
    r = swap(Mode.SERIAL, A=4, W=16)
    park(r, 0, "A")
    assert r(5, "request", "W") == [Reclaim("A")]
    assert r(6, "residency", "A", GiB, refused=True) == [Grant("W", TQ)]
    assert r.arb.resident_total() == 17 * GiB


def test_an_answer_that_leaves_memory_on_the_gpu_is_not_asked_again():
    """Asked again, it would answer the same: EVICT and RESIDENCY would go back and forth."""
    r = swap(A=8, W=12)
    park(r, 0, "A")
    assert r(5, "request", "W") == [Reclaim("A")]
    assert r(6, "residency", "A", 6 * GiB) == [Grant("W", TQ)]   # 12 + 6 > 16: runs alone
    assert r.arb.resident_bytes("A") == 6 * GiB


# -- what a holder leaves, and what it reports ---------------------------------------------------
@pytest.mark.parametrize("report, left", [(None, 4), (0, 0), (3, 3), (6, 4), (20, 4)])
def test_a_holder_dropped_with_evict_leaves_what_it_reported(report, left):
    # without a report, what it was asked to keep (8 - the 4 GiB of room W needs); a report of
    # more is cut to that: the drop let it keep no more (residency is granted, backoff.py)
    r = swap(H=8, W=12)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", []),
             (TQ, "tick", [Drop("H", Q, evict=True)])])
    if report is not None:
        assert r(TQ + 0.5, "residency", "H", report * GiB) == []
    expected = [Grant("W", TQ)] if 12 + left <= 16 else [Reclaim("H")]
    assert r(TQ + 1, "release", "H") == expected
    assert r.arb.resident_bytes("H") == left * GiB


def test_a_holder_released_without_evict_leaves_its_footprint_whatever_it_reported():
    r = swap(H=8)
    assert r(0, "request", "H") == [Grant("H", TQ)]
    assert r(0.1, "residency", "H", 0) == []     # the swap-in at its grant: it holds
    assert r.arb.resident_bytes("H") == 8 * GiB
    assert r(1, "release", "H") == []
    assert r.arb.resident_bytes("H") == 8 * GiB and r.arb.resident_total() == 8 * GiB


def test_footprint_changes_cut_what_an_idle_client_keeps_and_disconnect_forgets_it():
    r = swap(A=8, W=12)
    park(r, 0, "A")
    r(2, "set_footprint", "A", 3 * GiB)
    assert r.arb.resident_bytes("A") == 3 * GiB
    r(3, "set_footprint", "A", 6 * GiB)             # growing while idle moves nothing in
    assert r.arb.resident_bytes("A") == 3 * GiB
    assert r(4, "request", "W") == [Grant("W", TQ)]   # 12 + 3 fit
    assert r(5, "disconnect", "A") == []
    assert r.arb.resident_total() == 12 * GiB


def test_running_holders_that_grow_past_the_budget_get_room_from_idle_clients():
    r = swap(A=8, H=4)
    park(r, 0, "A")
    assert r(2, "request", "H") == [Grant("H", TQ)]
    assert r(3, "set_footprint", "H", 12 * GiB) == [Reclaim("A")]


def test_mode_off_reclaims_nothing_but_counts():
    r = swap(Mode.OFF, A=8, W=12)
    r(0, "request", "A")
    r(1, "release", "A")
    assert r(2, "request", "W") == [Grant("W", 0.0)]
    assert r.arb.resident_total() == 20 * GiB


def test_the_snapshot_shows_the_resident_total_and_who_is_being_reclaimed():
    r = swap(A=4, B=4, W=12)
    now = park(r, 0, "A", "B")
    r(now, "request", "W")
    s = r.arb.snapshot(now)
    assert (s.resident, s.reclaiming, s.budget) == (8 * GiB, ("A",), 16 * GiB)
    assert r.arb.admit_budget == 8 * GiB
