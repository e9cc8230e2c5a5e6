"""The pure policy core, replayed with injected time: the arbiter's common rules, serial and off.

Auto mode, priorities and the dynamic quantum have their own modules (test_policy_auto.py,
test_policy_priority.py, test_policy_tq.py); test_policy_replay.py holds the shared Replay helper.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    CLIENT_OVERHEAD, DEFAULT_DYNAMIC_TQ, EVICT_AFTER_QUANTA, STRATEGIES, TQ_MAX, TQ_MIN, Arbiter,
    Drop, Evict, Grant, Mode, Overdue, SwitchReport,
)

from test_policy_replay import GiB, Replay, play

TQ = 10.0


def serial(**kw):
    return Arbiter(Mode.SERIAL, TQ, **kw)


def test_defaults_are_auto_mode_with_the_dynamic_quantum_and_unknown_capacity():
    arb = Arbiter()
    assert arb.mode == Mode.AUTO and arb.tq_explicit is None and arb.tq == DEFAULT_DYNAMIC_TQ
    assert arb.budget is None and arb.client_overhead == CLIENT_OVERHEAD == 768 * 2**20
    assert set(STRATEGIES) == set(Mode) and all(STRATEGIES[m].mode == m for m in Mode)


@pytest.mark.parametrize("kw", [{"capacity": -1}, {"reserve": -1}, {"capacity": 1.5},
                                {"client_overhead": True}])
def test_bad_sizes_are_refused(kw):
    with pytest.raises(ValueError, match="bytes"):
        Arbiter(**kw)


def test_bad_footprints_capacities_and_priorities_are_refused_and_change_nothing():
    arb = serial(capacity=GiB)
    for call in (lambda: arb.set_footprint("A", -1, 0), lambda: arb.set_capacity(-5, 0),
                 lambda: arb.set_priority("A", 1.5, 0), lambda: arb.set_priority("A", True, 0)):
        with pytest.raises(ValueError):
            call()
    assert arb.capacity == GiB and arb.footprint("A") == CLIENT_OVERHEAD and arb.priority("A") == 0


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


# -- serial mode and memory: evict only when the next holder needs the room ------------------------
def serial_10gib():
    return serial(capacity=10 * GiB, reserve=0, client_overhead=0)


def test_serial_takes_turns_without_eviction_when_both_fit():
    r = Replay(serial_10gib())
    r(0, "set_footprint", "A", 4 * GiB)
    r(0, "set_footprint", "B", 6 * GiB)  # 10 GiB together: exactly the budget
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", []),
        (TQ, "tick", [Drop("A", DropReason.QUANTUM, evict=False)]),
        (TQ + 1, "release", "A", [Grant("B", TQ, prefetch=False)]),
    ])


def test_serial_evicts_when_the_next_waiter_does_not_fit_beside_the_holder_and_prefetches_after():
    r = Replay(serial_10gib())
    r(0, "set_footprint", "A", 4 * GiB)
    r(0, "set_footprint", "B", 6 * GiB + 1)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", []),
        (TQ, "tick", [Drop("A", DropReason.QUANTUM, evict=True)]),
        (TQ + 1, "release", "A", [Grant("B", TQ, prefetch=False)]),
        (TQ + 2, "request", "A", []),
        (2 * TQ + 1, "tick", [Drop("B", DropReason.QUANTUM, evict=True)]),
        (2 * TQ + 2, "release", "B", [Grant("A", TQ, prefetch=True)]),  # A was evicted: bulk back
        (2 * TQ + 3, "release", "A", []),
        (2 * TQ + 4, "request", "A", [Grant("A", TQ, prefetch=False)]),  # PREFETCH is used once
    ])


def test_serial_judges_eviction_by_the_waiter_that_comes_next():
    r = Replay(serial_10gib())
    r(0, "set_footprint", "A", 4 * GiB)
    r(0, "set_footprint", "big", 8 * GiB)
    r(0, "request", "A")
    r(1, "request", "small")          # 0 bytes: fits beside A
    r(2, "request", "big")
    assert r(TQ, "tick") == [Drop("A", DropReason.QUANTUM, evict=False)]
    assert r(TQ + 1, "release", "A") == [Grant("small", TQ)]


def test_serial_never_evicts_when_the_capacity_is_unknown():
    r = Replay(serial())
    r(0, "set_footprint", "A", 400 * GiB)
    r(0, "set_footprint", "B", 400 * GiB)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == [Drop("A", DropReason.QUANTUM, evict=False)]


def test_serial_admin_drops_evict_only_what_does_not_fit_beside_the_kept_holder():
    r = Replay(Arbiter(Mode.OFF, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    with_sizes = {"A": 5, "B": 5, "C": 6}
    for t, (c, size) in enumerate(with_sizes.items()):
        r(t, "set_footprint", c, size * GiB)
        r(t, "request", c)
    assert r(5, "set_mode", Mode.SERIAL) == [Drop("B", DropReason.ADMIN, evict=False),
                                             Drop("C", DropReason.ADMIN, evict=True)]


def test_footprints_count_the_context_overhead_and_the_reserve_defaults_to_5_percent():
    arb = serial(capacity=20 * GiB)
    arb.set_footprint("A", 3 * GiB, 0)
    assert arb.footprint("A") == 3 * GiB + CLIENT_OVERHEAD
    assert arb.footprint("new") == CLIENT_OVERHEAD
    assert arb.reserve == GiB and arb.budget == 19 * GiB
    arb.set_capacity(40 * GiB, 0)    # the default reserve follows the capacity
    assert arb.budget == 38 * GiB
    assert serial(capacity=20 * GiB, reserve=5 * GiB).budget == 15 * GiB
    assert serial(capacity=GiB, reserve=2 * GiB).budget == 0
    arb.set_capacity(0, 0)
    assert arb.budget is None        # unknown again: everything fits


def test_releases_with_reports_work_in_serial_and_off():
    r = Replay(serial())
    r(0, "request", "A")
    assert r(1, "release", "A", report=SwitchReport(drain=0.01, evict=0.0, prefetch=0.0)) == []
    r = Replay(Arbiter(Mode.OFF, TQ))
    r(0, "request", "A")
    assert r(1, "release", "A", report=SwitchReport()) == []
