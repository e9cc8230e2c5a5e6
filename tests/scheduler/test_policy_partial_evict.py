"""A holder dropped to make room for a waiter moves only the room the waiter needs (Drop.evict_mib,
DROP_LOCK's evict_mib): what it keeps stays parked on the GPU like an idle client's memory, and the
waiter is granted once its report says that much left (until then, it counts what it was asked to
keep). One whose data may all stay is dropped without EVICT; one asked to keep nothing, or that
does not answer EVICT, moves all of it (0). Scripted replays, time injected; 16 GiB, no reserve, so sizes read directly.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Grant, Mode, Reclaim

from test_policy_replay import GiB, Replay, play

TQ = 10.0
Q, P = DropReason.QUANTUM, DropReason.PREEMPTED
MiB = 1 << 20


def arbiter(mode, overhead_gib=0, **sizes_gib):
    r = Replay(Arbiter(mode, TQ, capacity=16 * GiB, reserve=0, client_overhead=int(overhead_gib * GiB)))
    for c, size in sizes_gib.items():
        r(0, "set_swappable", c, True)
        r(0, "set_footprint", c, int(size * GiB))
    return r


def drops(actions):
    return [(a.client, a.reason, a.evict, a.evict_mib) for a in actions if isinstance(a, Drop)]


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
@pytest.mark.parametrize("holder, waiter, moved, asked", [
    (8, 12, 4, 4096),        # 8 + 12 on 16 GiB: 4 GiB of the holder's 8 must go
    (8, 9, 1, 1024),
    (6.5, 10, 0.5, 512),     # MiB, not GiB, are the unit
    (8 + 1 / GiB, 12, 4 + 1 / 1024, 4097),  # rounded up: a byte more is a MiB more
    (8, 16, 8, 0),           # the waiter takes the whole GPU: all of it, whatever it has by then
])
def test_a_holder_whose_turn_ends_moves_only_the_room_the_waiter_needs(mode, holder, waiter, moved,
                                                                        asked):
    r = arbiter(mode, H=holder, W=waiter)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, True, asked)]
    # It reports what stays before it releases (the library moved whole allocations, at least that)
    assert r(TQ + 0.5, "residency", "H", int((holder - moved) * GiB)) == []
    assert r(TQ + 1, "release", "H") == [Grant("W", TQ)]
    assert r.arb.resident_bytes("H") == int((holder - moved) * GiB)
    assert r.arb.resident_total() == int((holder - moved + waiter) * GiB)
    # What it moved comes back in bulk at its next grant
    r(TQ + 2, "release", "W")
    r(TQ + 2.5, "residency", "W", 0)
    assert r(TQ + 3, "request", "H") == [Grant("H", TQ, prefetch=True)]


def test_a_preempted_holder_moves_only_the_room_of_the_higher_priority_waiter():
    r = arbiter(Mode.AUTO, B=6, I=1)
    r(0, "set_priority", "I", 10)
    play(r, [(0, "request", "B", [Grant("B", TQ)])])
    r(0.5, "set_capacity", int(6.5 * GiB))
    assert drops(r(1, "request", "I")) == [("B", P, True, 512)]
    assert r(1.1, "residency", "B", int(5.5 * GiB)) == []
    assert r(1.2, "release", "B") == [Grant("I", TQ)]


@pytest.mark.parametrize("holder, asked", [(7, None), (8, 1024)])
def test_a_holder_whose_data_may_all_stay_is_dropped_without_evict(holder, asked):
    # 1 GiB of context each: the waiter needs 9 of 16; an idle client's context is not counted,
    # so 7 GiB of data may stay: a holder with 7 is dropped without EVICT (its footprint with its
    # context, 8, would not have fit beside the waiter's 9)
    r = arbiter(Mode.SERIAL, overhead_gib=1, H=holder, W=8)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, asked is not None, asked or 0)]
    if asked:
        r(TQ + 0.5, "residency", "H", 7 * GiB)
    assert r(TQ + 1, "release", "H") == [Grant("W", TQ)]
    assert r.arb.resident_bytes("H") == 7 * GiB
    if not asked:
        r(TQ + 2, "release", "W")
        assert r(TQ + 3, "request", "H") == [Grant("H", TQ)], "nothing moved: no prefetch"


def test_a_holder_that_does_not_answer_evict_moves_all_of_it():
    # not counted once it released: nothing of it may stay
    r = arbiter(Mode.AUTO, H=8, W=12)
    r(0, "set_swappable", "H", False)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, True, 0)]


def test_until_it_reports_a_dropped_holder_counts_what_it_was_asked_to_keep():
    # NVSHARE_EVICT=background: the release comes before the report of what stays
    r = arbiter(Mode.AUTO, H=8, W=12, X=4)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, True, 4096)]
    assert r(TQ + 1, "release", "H") == [Grant("W", TQ)]
    assert r.arb.resident_bytes("H") == 4 * GiB
    assert r(TQ + 2, "request", "X") == [Reclaim("H")], "4 + 12 + 4 > 16: H's 4 GiB are asked for"
    assert r(TQ + 3, "residency", "H", 0) == [Grant("X", TQ)]


def test_of_several_holders_dropped_the_last_chosen_keeps_what_the_waiter_leaves():
    r = arbiter(Mode.AUTO, A=3, B=5, W=14)
    play(r, [(0, "request", "A", [Grant("A", TQ)]),
             (0.5, "request", "B", [Grant("B", TQ)]),
             (1, "request", "W", [])])
    # Both quanta end: A (granted first) goes first; 5 + 14 > 16, so B too; 14 leaves 2 GiB, which
    # B (chosen last) keeps; A keeps nothing and moves all it has
    assert drops(r(TQ + 0.5, "tick")) == [("A", Q, True, 0), ("B", Q, True, 3 * 1024)]
    r(TQ + 0.6, "residency", "A", 0)
    r(TQ + 0.7, "residency", "B", 2 * GiB)
    assert r(TQ + 1, "release", "A") == []
    assert r(TQ + 1.5, "release", "B") == [Grant("W", TQ)]


def test_a_holder_that_says_it_kept_more_than_asked_is_counted_for_what_it_was_asked_to_keep():
    r = arbiter(Mode.AUTO, H=8, W=12)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, True, 4096)]
    assert r(TQ + 0.5, "residency", "H", 6 * GiB) == []   # more than the drop let it keep
    assert r(TQ + 1, "release", "H") == [Grant("W", TQ)]  # residency is granted: 4 + 12 fit
    assert r.arb.resident_bytes("H") == 4 * GiB


def test_a_holder_that_kept_more_than_asked_for_want_of_host_memory_is_counted_for_it():
    r = arbiter(Mode.AUTO, H=8, W=12)
    play(r, [(0, "request", "H", [Grant("H", TQ)]),
             (1, "request", "W", [])])
    assert drops(r(TQ, "tick")) == [("H", Q, True, 4096)]
    assert r(TQ + 0.5, "residency", "H", 6 * GiB, refused=True) == []
    assert r.arb.resident_bytes("H") == 8 * GiB    # still the holder: its footprint
    r(TQ + 1, "release", "H")
    assert r.arb.resident_bytes("H") == 6 * GiB    # what it could not move stays counted
