"""Priorities in auto and serial mode: preemption at once by a higher base priority, equal
priorities taking turns by quantum, aging that lets low priority through without ever preempting.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import AGING_QUANTA, Arbiter, Drop, Grant, Mode

from test_policy_replay import GiB, Replay, auto, play, with_footprints

TQ = 10.0
Q, P = DropReason.QUANTUM, DropReason.PREEMPTED


def serial(**kw):
    return Arbiter(Mode.SERIAL, TQ, **kw)


# -- auto mode ------------------------------------------------------------------------------------
def test_a_higher_priority_request_preempts_the_newest_lower_holder_at_once_with_evict():
    r = Replay(auto())
    with_footprints(r, 0, A=3, B=3, C=5)
    r(0, "set_priority", "C", 5)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", [Grant("B", TQ)]),
        (2, "request", "C", [Drop("B", P, evict=True)]),  # dropping B alone makes room
        (2.5, "tick", []),
        (3, "release", "B", [Grant("C", TQ)]),
        (4, "request", "B", []),                          # no room beside A and C
        (5, "release", "C", [Grant("B", TQ, prefetch=True)]),
    ])


def test_preemption_takes_the_lowest_priority_first_and_only_as_many_as_needed():
    r = Replay(auto())
    with_footprints(r, 0, A=3, B=3, C=3, H=5)
    r(0, "set_priority", "B", 1)
    r(0, "set_priority", "C", 1)
    r(0, "set_priority", "H", 2)
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    # A (0), then C (1, newer than B): 3 + 5 fits; B keeps running
    assert r(5, "request", "H") == [Drop("A", P, evict=True), Drop("C", P, evict=True)]


def test_holders_of_equal_or_higher_priority_are_never_preempted():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6, C=6)
    r(0, "set_priority", "A", 2)
    r(0, "set_priority", "B", 2)
    r(0, "set_priority", "C", 3)
    r(0, "request", "C")
    assert r(1, "request", "A") == []                 # 2 < 3
    assert r(2, "request", "B") == []                 # 2 == 2 beside A: waits its turn
    assert [a for _, a in r.actions if isinstance(a, Drop)] == []


def test_no_preemption_when_even_dropping_every_lower_holder_would_not_make_room():
    r = Replay(auto())
    with_footprints(r, 0, low=3, high=5, H=6)
    r(0, "set_priority", "high", 9)
    r(0, "set_priority", "H", 5)
    r(0, "request", "low")
    r(1, "request", "high")
    assert r(2, "request", "H") == []                 # 5 + 6 > 10 even without low: low keeps going
    assert r.arb.state_of("low") == "holding"


def test_set_priority_of_a_waiter_preempts_at_once():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "set_priority", "B", 1) == [Drop("A", P, evict=True)]


def test_lowering_a_holder_priority_lets_the_waiter_preempt_it():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "set_priority", "A", 3)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == []                        # B (0) may not take A's (3) turn yet
    assert r(TQ + 1, "set_priority", "A", -1) == [Drop("A", Q, evict=True)]  # expired: its turn


def test_a_waiter_is_not_granted_past_a_blocked_one_that_would_preempt_it():
    r = Replay(auto())
    with_footprints(r, 0, A=6, hi=6, lo=1)
    r(0, "set_priority", "A", 5)
    r(0, "set_priority", "hi", 3)
    r(0, "request", "A")
    r(1, "request", "hi")                             # blocked; A outranks it
    assert r(2, "request", "lo") == []                # it fits, but hi could only preempt it
    assert r.arb.describe(2)["blocked"] == ["hi", "lo"]
    assert r(3, "set_priority", "lo", 3) == [Grant("lo", TQ)]  # as high as hi: it may pass


def test_equal_priorities_rotate_by_quantum():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6, C=6)
    for t, c in enumerate("ABC"):
        r(t * 0.1, "request", c)
    order, holder = ["A"], "A"
    for _ in range(6):
        now = r.arb.next_deadline()
        assert r(now, "tick") == [Drop(holder, Q, evict=True)]
        (grant,) = r(now + 0.05, "release", holder)
        r(now + 0.06, "request", holder)              # busy: asks again at once
        holder = grant.client
        order.append(holder)
    assert order == list("ABCABCA")


def test_aging_lets_low_priority_through_and_never_preempts():
    r = Replay(auto())
    with_footprints(r, 0, H=6, L=6)
    r(0, "set_priority", "H", 2)
    r(0, "request", "H")
    r(1, "request", "L")
    # L ages one step per AGING_QUANTA quanta; H's quanta end and are looked at again each quantum
    assert AGING_QUANTA == 2
    for k in range(1, 5):
        assert r(k * TQ, "tick") == [], k             # L not yet at H's priority 2
        assert r.arb.next_deadline() == (k + 1) * TQ
    assert r.arb.effective_priority("L", 4 * TQ) == 1  # waited 3.9 quanta
    assert r(5 * TQ, "tick") == [Drop("H", Q, evict=True)]  # 4.9 quanta: priority 2
    play(r, [
        (5 * TQ + 1, "release", "H", [Grant("L", TQ)]),
        (5 * TQ + 2, "request", "H", []),             # 2 is not above the 2 L was granted at
        (6 * TQ, "tick", []),
        (6 * TQ + 1, "tick", [Drop("L", Q, evict=True)]),  # L's full quantum, then H's turn
        (6 * TQ + 2, "release", "L", [Grant("H", TQ, prefetch=True)]),
    ])


def test_a_preempted_client_goes_on_aging_from_the_wait_it_had():
    """Otherwise a busy higher-priority client that comes back each time would preempt it at once,
    every time, and it would never age enough to keep a turn."""
    r = Replay(auto())
    with_footprints(r, 0, H=6, L=6)
    r(0, "set_priority", "H", 2)
    r(0, "request", "H")
    r(0, "request", "L")
    assert r(3 * TQ, "release", "H") == [Grant("L", TQ)]  # idle release; L waited 3 quanta: 1
    assert r(3 * TQ + 1, "request", "H") == [Drop("L", P, evict=True)]  # 2 > 1: at once
    assert r(3 * TQ + 2, "release", "L") == [Grant("H", TQ)]
    r(3 * TQ + 2, "request", "L")
    assert r.arb.effective_priority("L", 3 * TQ + 2) == 1    # not back to 0
    assert r(4 * TQ + 2, "tick") == [Drop("H", Q, evict=True)]  # 4 quanta waited in all: 2
    assert r(4 * TQ + 3, "release", "H") == [Grant("L", TQ, prefetch=True)]
    assert r(4 * TQ + 4, "request", "H") == []            # 2 is not above L's 2: L keeps its turn
    assert r(5 * TQ + 3, "tick") == [Drop("L", Q, evict=True)]
    r(5 * TQ + 4, "release", "L")
    r(5 * TQ + 4, "request", "L")
    assert r.arb.effective_priority("L", 5 * TQ + 4) == 0    # a full turn had: aging starts over


def test_a_preempted_client_that_reconnects_starts_its_wait_afresh():
    r = Replay(auto())
    with_footprints(r, 0, H=6, L=6)
    r(0, "set_priority", "H", 2)
    r(0, "request", "H")
    r(0, "request", "L")
    r(3 * TQ, "release", "H")
    r(3 * TQ + 1, "request", "H")                          # preempts L
    r(3 * TQ + 2, "disconnect", "L")
    r(3 * TQ + 3, "set_footprint", "L", 6 * GiB)
    r(3 * TQ + 3, "request", "L")
    assert r.arb.effective_priority("L", 3 * TQ + 3) == 0


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_a_waiter_aged_above_a_holder_waits_for_the_end_of_its_quantum(mode):
    r = Replay(Arbiter(mode, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    with_footprints(r, 0, X=6, H=6, L=6)
    r(0, "set_priority", "X", 9)
    r(0, "set_priority", "H", 8)
    r(0, "set_priority", "L", -8)
    r(0, "request", "X")
    r(0, "request", "L")
    r(90, "request", "H")
    assert r(95, "release", "X")[0] == Grant("H", TQ)  # deadline 105
    r(96, "set_priority", "H", -8)                    # L (-8, aged to -4) now ranks above H...
    assert r.arb.effective_priority("L", 96) == -4
    assert r(100, "tick") == []                       # ... but aging never preempts
    assert r(105, "tick") == [Drop("H", Q, evict=True)]  # at the quantum's end: L's turn


# -- serial mode ----------------------------------------------------------------------------------
def test_serial_serves_waiters_by_priority_then_arrival():
    r = Replay(serial())
    r(0, "set_priority", "C", 1)
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "request", "C")
    r(3, "request", "D")
    assert r.arb.order(3) == ["C", "B", "D"]
    assert r.arb.describe(3)["blocked"] == ["C", "B", "D"]


def test_serial_preempts_at_once_on_a_higher_request_and_evicts_only_when_it_must():
    r = Replay(serial(capacity=10 * GiB, reserve=0, client_overhead=0))
    with_footprints(r, 0, A=4, B=4, C=7)
    r(0, "set_priority", "B", 1)
    r(0, "set_priority", "C", 2)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", [Drop("A", P, evict=False)]),  # 4 + 4 fit: no eviction
        (2, "release", "A", [Grant("B", TQ)]),
        (3, "request", "C", [Drop("B", P, evict=True)]),   # 4 + 7 do not
        (4, "release", "B", [Grant("C", TQ)]),
    ])


def test_serial_set_priority_preempts_at_once():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "set_priority", "B", 1) == [Drop("A", P)]
    assert r(3, "set_priority", "B", 1) == []          # the drop is not repeated


def test_serial_expiry_with_a_lower_waiter_is_looked_at_again_each_quantum_until_aging_catches_up():
    r = Replay(serial())
    r(0, "set_priority", "H", 1)
    r(0, "request", "H")
    r(0, "request", "L")
    assert r(TQ, "tick") == []
    assert r.arb.holders["H"].expired and r.arb.next_deadline() == 2 * TQ
    assert r(TQ + 1, "request", "M") == []            # another low request: still not H's equal
    assert r.arb.next_deadline() == 2 * TQ            # the check is not pushed back by events
    assert r(2 * TQ, "tick") == [Drop("H", Q)]        # L waited 2 quanta: priority 1
    assert r(2 * TQ + 1, "release", "H") == [Grant("L", TQ)]


def test_serial_equal_priorities_rotate_and_aging_never_reorders_them():
    r = Replay(serial())
    for t, c in enumerate("ABC"):
        r(t * 0.1, "request", c)
    holder, order = "A", ["A"]
    for _ in range(5):
        now = r.arb.next_deadline()
        assert r(now, "tick") == [Drop(holder, Q)]
        (grant,) = r(now + 0.05, "release", holder)
        r(now + 0.06, "request", holder)
        holder = grant.client
        order.append(holder)
    assert order == list("ABCABC")


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_priorities_are_forgotten_on_disconnect(mode):
    r = Replay(Arbiter(mode, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    with_footprints(r, 0, A=6, B=6)
    r(0, "set_priority", "B", 4)
    r(0, "disconnect", "B")
    r(1, "request", "A")
    r(1, "set_footprint", "B", 6 * GiB)
    assert r(2, "request", "B") == []                 # priority 0 again: no preemption


def test_off_ignores_priorities():
    r = Replay(Arbiter(Mode.OFF, TQ))
    r(0, "set_priority", "A", -5)
    r(0, "set_priority", "B", 5)
    assert r(0, "request", "A") == [Grant("A", 0.0)]
    assert r(1, "request", "B") == [Grant("B", 0.0)]
