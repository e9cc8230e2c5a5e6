"""The pure policy core, replayed with injected time."""

import pytest

from xpushare.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Grant, Mode, Overdue

TQ = 10.0


def serial():
    return Arbiter(Mode.SERIAL, TQ)


class Replay:
    """Feeds an arbiter a script and checks invariants after every step."""

    def __init__(self, arb):
        self.arb = arb
        self.granted = []  # (time, client) of every Grant, to check no double grant

    def __call__(self, now, op, *args):
        actions = getattr(self.arb, op)(*args, now)
        for a in actions:
            if isinstance(a, Grant):
                self.granted.append((now, a.client))
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


def test_quantum_expiry_without_waiters_keeps_the_holder_and_rearms():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(TQ, "tick") == []
    assert list(r.arb.holders) == ["A"]
    assert r.arb.next_deadline() == 2 * TQ
    # A waiter arriving later waits for the re-armed quantum, then A is dropped.
    assert r(TQ + 5, "request", "B") == []
    assert r(2 * TQ, "tick") == [Drop("A", DropReason.QUANTUM)]


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


def test_unresponsive_holder_is_never_replaced_and_is_reported_overdue():
    r = Replay(serial())
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == [Drop("A", DropReason.QUANTUM)]
    assert r(2 * TQ, "tick") == [Overdue("A", TQ)]
    assert r(3 * TQ, "tick") == [Overdue("A", 2 * TQ)]
    assert [c for _, c in r.granted] == ["A"]
    assert r(3 * TQ + 1, "release", "A") == [Grant("B", TQ)]


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
