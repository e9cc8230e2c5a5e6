"""The pure policy core, replayed with injected time."""

import pytest

from xpushare.protocol import DropReason
from xpushare.scheduler.policy import (
    EVICT_AFTER_QUANTA, TQ_MAX, TQ_MIN, Arbiter, Drop, Evict, Grant, Mode, Overdue,
)

TQ = 10.0


def serial():
    return Arbiter(Mode.SERIAL, TQ)


class Replay:
    """Feeds an arbiter a script and checks invariants after every step."""

    def __init__(self, arb):
        self.arb = arb
        self.granted = []  # (time, client) of every Grant, to check no double grant
        self.evicted = []  # (time, client) of every Evict

    def __call__(self, now, op, *args):
        actions = getattr(self.arb, op)(*args, now)
        for a in actions:
            if isinstance(a, Grant):
                self.granted.append((now, a.client))
            if isinstance(a, Evict):
                self.evicted.append((now, a.client))
                assert self.arb.state_of(a.client) == "idle", "an evicted client keeps nothing"
        deadline = self.arb.next_deadline()
        assert deadline is None or deadline > now, "a deadline left in the past would spin the timer"
        assert not set(self.arb.holders) & set(self.arb.queue)
        if self.arb.mode == Mode.SERIAL:
            assert len([h for h in self.arb.holders.values() if h.drop_sent is None]) <= 1
        return actions


def test_first_request_is_granted_with_the_quantum():
    r = Replay(serial())
    assert r(0, "request", "A") == [Grant("A", TQ)]
    assert r.arb.next_deadline() == TQ


def test_fcfs_order_of_waiters():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(1, "request", "B") == []
    assert r(2, "request", "C") == []
    assert r.arb.queue == ["B", "C"]
    assert r(3, "release", "A") == [Grant("B", TQ)]
    assert r(4, "release", "B") == [Grant("C", TQ)]
    assert r(5, "release", "C") == []
    assert not r.arb.holders and not r.arb.queue


def test_quantum_expiry_with_a_waiter_drops_the_holder_once():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ - 0.01, "tick") == []
    assert r(TQ, "tick") == [Drop("A", DropReason.QUANTUM)]
    # Still draining: nobody else is granted, the drop is not repeated.
    assert r(TQ + 1, "tick") == []
    assert r(TQ + 2, "request", "C") == []
    assert list(r.arb.holders) == ["A"]
    assert r(TQ + 3, "release", "A") == [Grant("B", TQ)]
    assert r.arb.holders["B"].since == TQ + 3
    assert r.arb.next_deadline() == 2 * TQ + 3


def test_quantum_expiry_without_waiters_keeps_the_holder_marked_expired():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(TQ, "tick") == []
    assert list(r.arb.holders) == ["A"] and r.arb.holders["A"].expired
    assert r.arb.next_deadline() is None  # nothing left to time: no timer keeps firing
    assert r(3 * TQ, "tick") == []
    assert r(3 * TQ, "request", "A") == []  # its own request changes nothing
    assert list(r.arb.holders) == ["A"]


def test_request_after_an_unused_expiry_drops_the_holder_at_once():
    """The waiter does not wait for a quantum the holder has already had (nor on timer jitter)."""
    r = Replay(serial())
    r(0, "request", "A")
    r(TQ, "tick")
    assert r(TQ + 0.25 * TQ, "request", "B") == [Drop("A", DropReason.QUANTUM)]
    assert r(TQ + 0.3 * TQ, "release", "A") == [Grant("B", TQ)]
    assert not r.arb.holders["B"].expired and r.arb.next_deadline() == 1.3 * TQ + TQ


def test_a_new_grant_after_an_expired_holding_has_a_full_quantum():
    r = Replay(serial())
    r(0, "request", "A")
    r(TQ, "tick")
    assert r(TQ + 1, "release", "A") == []      # e.g. idle release
    assert r(TQ + 2, "request", "A") == [Grant("A", TQ)]
    assert r(TQ + 3, "request", "B") == []      # A's new quantum is not spent
    assert r(2 * TQ + 2, "tick") == [Drop("A", DropReason.QUANTUM)]


def test_set_tq_leaves_an_expired_holder_expired():
    r = Replay(serial())
    r(0, "request", "A")
    r(TQ, "tick")
    assert r(TQ + 1, "set_tq", 2 * TQ) == []
    assert r(TQ + 2, "request", "B") == [Drop("A", DropReason.QUANTUM)]


def test_serial_again_gives_the_kept_holder_a_fresh_quantum_even_if_it_had_expired():
    r = Replay(serial())
    r(0, "request", "A")
    r(TQ, "tick")
    r(TQ + 1, "set_mode", Mode.OFF)
    r(TQ + 2, "set_mode", Mode.SERIAL)
    assert not r.arb.holders["A"].expired and r.arb.next_deadline() == 2 * TQ + 2
    assert r(TQ + 3, "request", "B") == []


def test_expired_quantum_is_noticed_on_a_request_before_the_timer_fires():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(TQ + 0.5, "request", "B") == [Drop("A", DropReason.QUANTUM)]


def test_release_of_a_lock_not_held_and_repeated_requests_are_ignored():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "release", "B") == []       # B only waits
    assert r(2, "release", "Z") == []       # unknown
    assert r(3, "request", "A") == []       # A already holds
    assert r(3, "request", "B") == []       # B already queued
    assert r.arb.queue == ["B"]
    assert list(r.arb.holders) == ["A"]


def test_unresponsive_holder_is_reported_overdue_then_evicted():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == [Drop("A", DropReason.QUANTUM)]
    assert r(2 * TQ, "tick") == [Overdue("A", TQ)]
    assert r(2 * TQ + 1, "request", "C") == []  # still draining: nobody is granted in its place
    assert [c for _, c in r.granted] == ["A"]
    assert EVICT_AFTER_QUANTA == 2
    assert r(3 * TQ - 0.01, "tick") == []
    assert r(3 * TQ, "tick") == [Evict("A", 2 * TQ), Grant("B", TQ)]
    assert r.arb.queue == ["C"]
    assert r(3 * TQ + 1, "release", "A") == []  # a late answer from the evicted client is ignored
    assert r(3 * TQ + 1, "disconnect", "A") == []  # and so is its disconnect
    assert list(r.arb.holders) == ["B"]


def test_eviction_counts_from_the_drop_with_the_current_quantum():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(TQ, "tick")                               # drop sent at TQ
    r(TQ + 1, "set_tq", TQ / 2)                 # a draining holder keeps its schedule...
    assert r(2 * TQ, "tick") == [Evict("A", TQ), Grant("B", TQ / 2)]  # ...judged by the new quantum


def test_holder_released_in_time_is_never_evicted():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(TQ, "tick")
    r(2 * TQ, "tick")                           # Overdue
    assert r(3 * TQ - 1, "release", "A") == [Grant("B", TQ)]
    assert r(3 * TQ, "tick") == []
    assert r.evicted == []


def test_administratively_dropped_holder_is_evicted_too():
    r = Replay(Arbiter(Mode.OFF, TQ))
    r(0, "request", "A")
    r(0, "request", "B")
    assert r(1, "set_mode", Mode.SERIAL) == [Drop("B", DropReason.ADMIN)]
    assert r(1 + TQ, "tick") == [Overdue("B", TQ)]
    assert r(1 + 2 * TQ, "tick") == [Evict("B", 2 * TQ)]
    assert list(r.arb.holders) == ["A"]


def test_no_eviction_in_mode_off():
    r = Replay(Arbiter(Mode.OFF, TQ))
    r(0, "request", "A")
    r(0, "request", "B")
    r(1, "set_mode", Mode.SERIAL)               # B dropped
    r(2, "set_mode", Mode.OFF)                  # B still draining, but nobody waits for it in off
    assert r.arb.next_deadline() is None
    assert r(100 * TQ, "tick") == []
    assert list(r.arb.holders) == ["A", "B"] and r.evicted == []


def test_disconnect_of_the_holder_grants_the_next_at_once():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "request", "C")
    assert r(3, "disconnect", "A") == [Grant("B", TQ)]
    assert r.arb.queue == ["C"]


def test_disconnect_of_a_waiter_removes_it_from_the_queue():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "request", "C")
    assert r(3, "disconnect", "B") == []
    assert r(4, "release", "A") == [Grant("C", TQ)]
    assert r(5, "disconnect", "B") == []  # twice: harmless


def test_disconnect_of_a_dropped_holder_frees_the_gpu():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(TQ, "tick")
    assert r(TQ + 1, "disconnect", "A") == [Grant("B", TQ)]


def test_set_tq_rearms_the_current_holder():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(5, "set_tq", 2.0) == []
    assert r.arb.next_deadline() == 7.0
    assert r(6.9, "tick") == []
    assert r(7.0, "tick") == [Drop("A", DropReason.QUANTUM)]
    assert r(7.5, "release", "A") == [Grant("B", 2.0)]


def test_set_tq_rejects_non_positive():
    with pytest.raises(ValueError):
        serial().set_tq(0, 0)
    with pytest.raises(ValueError):
        Arbiter(Mode.SERIAL, -1)


@pytest.mark.parametrize("tq", [1e7, TQ_MAX + 1, float("inf"), float("nan"), TQ_MIN / 2])
def test_quanta_that_do_not_fit_u32_milliseconds_are_refused(tq):
    with pytest.raises(ValueError, match="between 0.001 and 4294967 seconds"):
        Arbiter(Mode.SERIAL, tq)
    arb = serial()
    with pytest.raises(ValueError, match="between 0.001 and 4294967 seconds"):
        arb.set_tq(tq, 0)
    assert arb.tq == TQ  # unchanged


def test_the_extreme_quanta_are_accepted_and_fit_u32_milliseconds():
    for tq in (TQ_MIN, TQ_MAX):
        r = Replay(Arbiter(Mode.SERIAL, tq))
        (grant,) = r(0, "request", "A")
        assert 1 <= round(grant.quantum * 1000) <= 0xFFFFFFFF


def test_off_grants_everyone_at_once_without_quantum():
    r = Replay(Arbiter(Mode.OFF, TQ))
    assert r(0, "request", "A") == [Grant("A", 0.0)]
    assert r(1, "request", "B") == [Grant("B", 0.0)]
    assert r.arb.next_deadline() is None
    assert r(100, "tick") == []
    assert r(101, "release", "A") == []
    assert list(r.arb.holders) == ["B"]


def test_serial_to_off_grants_all_waiters():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "request", "C")
    assert r(3, "set_mode", Mode.OFF) == [Grant("B", 0.0), Grant("C", 0.0)]
    assert list(r.arb.holders) == ["A", "B", "C"]
    assert r.arb.next_deadline() is None  # A's quantum no longer applies
    assert r(3 + 2 * TQ, "tick") == []


def test_off_to_serial_keeps_the_first_holder_and_drops_the_rest():
    r = Replay(Arbiter(Mode.OFF, TQ))
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    actions = r(10, "set_mode", Mode.SERIAL)
    assert actions == [Drop("B", DropReason.ADMIN), Drop("C", DropReason.ADMIN)]
    assert r.arb.next_deadline() == 10 + TQ
    # A new client waits until every dropped holder has released; then FCFS resumes.
    assert r(11, "request", "D") == []
    assert r(12, "release", "B") == []
    assert r(13, "request", "B") == []      # B queues again with its next request
    assert r.arb.queue == ["D", "B"]
    assert r(14, "release", "C") == []      # A still holds
    assert r(15, "release", "A") == [Grant("D", TQ)]
    assert r(16, "release", "D") == [Grant("B", TQ)]


def test_off_to_serial_with_a_waiter_drops_at_the_quantum():
    r = Replay(Arbiter(Mode.OFF, TQ))
    r(0, "request", "A")
    r(1, "set_mode", Mode.SERIAL)
    r(2, "request", "B")
    assert r(1 + TQ, "tick") == [Drop("A", DropReason.QUANTUM)]


def test_set_mode_to_the_same_mode_does_nothing():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(5, "set_mode", Mode.SERIAL) == []
    assert r.arb.next_deadline() == TQ


def test_mode_round_trip_never_grants_twice():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "set_mode", Mode.OFF)             # B granted
    r(3, "set_mode", Mode.SERIAL)          # B dropped (admin)
    r(4, "set_mode", Mode.OFF)             # B still draining: no new grant
    r(5, "set_mode", Mode.SERIAL)
    assert [c for _, c in r.granted] == ["A", "B"]
    assert r.arb.holders["B"].drop_sent == 3


def test_state_of_clients():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert (r.arb.state_of("A"), r.arb.state_of("B"), r.arb.state_of("C")) == \
        ("holding", "waiting", "idle")


def test_long_scripted_rotation_is_fair():
    """Three always-busy clients: each gets the GPU in turn, one quantum each, in FCFS order."""
    r = Replay(serial())
    for t, c in enumerate("ABC"):
        r(t * 0.1, "request", c)
    order, now = ["A"], 0.0
    holder = "A"
    for _ in range(9):
        now = r.arb.next_deadline()
        assert r(now, "tick") == [Drop(holder, DropReason.QUANTUM)]
        now += 0.05  # drain time
        (grant,) = r(now, "release", holder)
        r(now + 0.01, "request", holder)  # busy: asks again at once
        holder = grant.client
        order.append(holder)
    assert order == list("ABC" * 4)[:10]
