"""Auto mode: memory-aware admission, blocking, bounded skip-ahead, quantum expiry with eviction,
growth past the budget, silent holders, mode changes and describe(). Scripted replays, time
injected.

Most scripts use a 10 GiB budget with no reserve and no context overhead, so sizes read directly.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    CLIENT_OVERHEAD, MAX_SKIP, Arbiter, Drop, Evict, Grant, Mode, Overdue,
)

from test_policy_replay import GiB, Replay, auto, play, with_footprints

TQ = 10.0
Q, P, M = DropReason.QUANTUM, DropReason.PREEMPTED, DropReason.MEMORY


def test_clients_that_fit_run_together_and_one_that_does_not_waits():
    r = Replay(auto())
    with_footprints(r, 0, A=4, B=4, C=4)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", [Grant("B", TQ)]),     # 8 GiB: fits beside A
        (2, "request", "C", []),                   # 12 GiB would not fit
        (3, "tick", []),                           # nobody is dropped before a quantum
    ])
    assert r.arb.state_of("C") == "waiting"
    assert r.arb.describe(3)["blocked"] == ["C"]
    assert r(4, "release", "B") == [Grant("C", TQ)]  # room again: C runs beside A at once


def test_the_context_overhead_and_the_default_reserve_are_counted():
    """10 GiB with the defaults: budget 9.5 GiB; every client takes 768 MiB more than it says."""
    r = Replay(Arbiter(Mode.AUTO, TQ, capacity=10 * GiB))
    assert r.arb.budget == int(9.5 * GiB)
    with_footprints(r, 0, A=3, B=3, C=4)
    assert r(0, "request", "A") == [Grant("A", TQ)]
    assert r(0, "request", "B") == [Grant("B", TQ)]  # 2 x 3.75 GiB = 7.5 GiB
    assert r(0, "request", "C") == []                # + 4.75 GiB > 9.5 GiB
    assert r.arb.describe(0)["used"] == 6 * GiB + 2 * CLIENT_OVERHEAD


def test_clients_that_never_told_their_footprint_count_their_context_only():
    r = Replay(Arbiter(Mode.AUTO, TQ, capacity=2 * CLIENT_OVERHEAD, reserve=0))
    assert r(0, "request", "A") == [Grant("A", TQ)]
    assert r(0, "request", "B") == [Grant("B", TQ)]
    assert r(0, "request", "C") == []


def test_with_the_capacity_unknown_everything_runs_at_once():
    r = Replay(auto(capacity=0))
    with_footprints(r, 0, A=500, B=500)
    assert r(0, "request", "A") == [Grant("A", TQ)]
    assert r(1, "request", "B") == [Grant("B", TQ)]
    assert r(TQ + 1, "tick") == []                   # quanta end, nobody waits: nobody drops
    assert r.arb.describe(TQ + 1)["operation"] == "concurrent"


def test_a_client_too_big_for_the_gpu_runs_alone_when_nobody_holds():
    r = Replay(auto())
    with_footprints(r, 0, A=12, B=1)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),     # alone, oversubscribing on its own
        (1, "request", "B", []),                   # nothing fits beside it
    ])
    d = r.arb.describe(1)
    assert d["operation"] == "serialised" and d["blocked"] == ["B"]
    play(r, [
        (TQ, "tick", [Drop("A", Q, evict=True)]),
        (TQ + 1, "release", "A", [Grant("B", TQ)]),
        (TQ + 2, "request", "A", []),              # waits for B's quantum...
        (2 * TQ + 1, "tick", [Drop("B", Q, evict=True)]),
        (2 * TQ + 2, "release", "B", [Grant("A", TQ, prefetch=True)]),  # ...and runs alone again
    ])


def test_a_too_big_client_waits_for_draining_holders_before_running_alone():
    r = Replay(auto())
    with_footprints(r, 0, A=4, B=12)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == [Drop("A", Q, evict=True)]
    assert r(TQ + 1, "tick") == []                 # A drains: B is not granted beside it
    assert r(TQ + 2, "release", "A") == [Grant("B", TQ)]


def test_quantum_expiry_drops_the_oldest_expired_holders_until_the_waiter_fits():
    r = Replay(auto())
    with_footprints(r, 0, A=3, B=3, C=3, W=4)
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    r(5, "request", "W")                           # 9 + 4 > 10: blocked
    play(r, [
        (TQ, "tick", [Drop("A", Q, evict=True)]),  # A's quantum: 6 + 4 fit once A is gone
        (TQ + 1, "tick", []),                      # B's quantum: A already makes the room
        (TQ + 2, "tick", []),
    ])
    assert r.arb.holders["B"].expired and r.arb.holders["C"].expired
    assert r.arb.next_deadline() == 2 * TQ         # only A's overdue check is left
    play(r, [
        (TQ + 3, "release", "A", [Grant("W", TQ)]),
        (TQ + 4, "request", "A", [Drop("B", Q, evict=True)]),  # expired B makes room for A at once
        (TQ + 5, "release", "B", [Grant("A", TQ, prefetch=True)]),
    ])


def test_expiry_waits_until_enough_holders_expired_to_make_room():
    """Dropping one expired holder that would not make room yet would only evict it for nothing."""
    r = Replay(auto())
    with_footprints(r, 0, A=4, B=4, W=8)
    r(0, "request", "A")
    r(5, "request", "B")
    r(6, "request", "W")
    assert r(TQ, "tick") == []                     # A's quantum: without A, 4 + 8 still > 10
    assert r.arb.holders["A"].expired
    assert r(TQ + 5, "tick") == [Drop("A", Q, evict=True), Drop("B", Q, evict=True)]
    assert r(TQ + 6, "release", "B") == []
    assert r(TQ + 7, "release", "A") == [Grant("W", TQ)]


def test_expiry_without_a_blocked_waiter_keeps_the_holder_running_until_one_comes():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=2, C=6)
    r(0, "request", "A")
    assert r(TQ, "tick") == []
    assert r.arb.holders["A"].expired and r.arb.next_deadline() is None
    assert r(TQ + 1, "request", "B") == [Grant("B", TQ)]  # fits: no reason to drop anybody
    # C is blocked: expired A goes at once
    assert r(TQ + 2, "request", "C") == [Drop("A", Q, evict=True)]
    assert r(TQ + 3, "release", "A") == [Grant("C", TQ)]


def test_the_room_made_for_a_waiter_is_not_taken_by_a_later_one():
    r = Replay(auto())
    with_footprints(r, 0, A=5, B=4, W=6, late=1)
    r(0, "request", "A")
    r(5, "request", "B")
    r(6, "request", "W")
    assert r(TQ, "tick") == [Drop("A", Q, evict=True)]
    assert r(TQ + 1, "request", "late") == []     # 5 + 4 + 1 fit, but the room is W's
    assert r(TQ + 2, "release", "A") == [Grant("W", TQ)]
    assert r.arb.describe(TQ + 2)["blocked"] == ["late"]


def test_skip_ahead_is_bounded_so_a_big_waiter_is_not_starved():
    r = Replay(auto())
    with_footprints(r, 0, A=4, big=8, s1=1, s2=1, s3=1, s4=1)
    assert MAX_SKIP == 3
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "big", []),
        (2, "request", "s1", [Grant("s1", TQ)]),   # skips past big: 1
        (3, "request", "s2", [Grant("s2", TQ)]),   # 2
        (4, "request", "s3", [Grant("s3", TQ)]),   # 3
        (5, "request", "s4", []),                  # it would fit, but big has been skipped enough
    ])
    assert r.arb.waiting["big"].skips == MAX_SKIP
    assert r.arb.describe(5)["blocked"] == ["big", "s4"]
    play(r, [
        (TQ, "tick", []),                          # A alone would not make room for 8 GiB
        (TQ + 2, "tick", [Drop("A", Q, evict=True), Drop("s1", Q, evict=True)]),
        (TQ + 3, "release", "s1", []),
        # 8 + s2 + s3 = 10; s4 is next, and s2's quantum is over: it makes room for s4
        (TQ + 4, "release", "A", [Grant("big", TQ), Drop("s2", Q, evict=True)]),
    ])
    assert r.arb.describe(TQ + 4)["blocked"] == ["s4"]


def test_skips_are_counted_per_waiter_granted_past_and_forgotten_once_it_runs():
    r = Replay(auto())
    with_footprints(r, 0, A=5, big=6, s1=1, s2=1)
    r(0, "request", "A")
    r(1, "request", "big")
    r(2, "request", "s1")
    r(2, "request", "s2")
    assert r.arb.waiting["big"].skips == 2
    r(TQ, "tick")                                  # A dropped for big (6 + 2 fits)
    r(TQ + 1, "release", "A")
    assert r.arb.state_of("big") == "holding"
    r(TQ + 2, "request", "A")
    assert r.arb.waiting["A"].skips == 0


def test_growth_past_the_budget_drops_the_newest_holder_and_concurrency_returns_when_it_fits():
    r = Replay(auto())
    with_footprints(r, 0, A=2, B=2)
    r(0, "request", "A")
    r(1, "request", "B")
    play(r, [
        (2, "set_footprint", "A", 7 * GiB, []),       # 9 GiB: still fits
        (3, "set_footprint", "A", 9 * GiB, [Drop("B", M, evict=True)]),
        (4, "release", "B", []),
        (5, "request", "B", []),                      # waits: 9 + 2 > 10
        (6, "set_footprint", "A", 8 * GiB, [Grant("B", TQ, prefetch=True)]),  # fits again
    ])


def test_growth_of_the_newest_holder_drops_that_holder_itself():
    r = Replay(auto())
    with_footprints(r, 0, A=2, B=2)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "set_footprint", "B", 9 * GiB) == [Drop("B", M, evict=True)]


def test_growth_drops_lowest_priority_then_newest_until_the_rest_fit_and_keeps_the_first():
    r = Replay(auto())
    with_footprints(r, 0, A=3, B=3, C=2, D=2)
    r(0, "set_priority", "B", 1)
    for t, c in enumerate("ABCD"):
        r(t, "request", c)
    # 3 + 3 + 5 + 2 = 13: D (priority 0, newest) then C, which grew, go; B is kept for its priority
    assert r(5, "set_footprint", "C", 5 * GiB) == [Drop("D", M, evict=True),
                                                   Drop("C", M, evict=True)]
    assert r(6, "set_footprint", "A", 20 * GiB) == [Drop("A", M, evict=True)]  # B ranks highest
    assert r.arb.live_holders() == ["B"]


def test_the_oldest_holder_is_kept_even_when_it_alone_exceeds_the_budget():
    r = Replay(auto())
    with_footprints(r, 0, A=2, B=2)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "set_footprint", "A", 30 * GiB) == [Drop("B", M, evict=True)]
    assert r(3, "set_footprint", "A", 40 * GiB) == []
    assert r.arb.live_holders() == ["A"]


def test_shrinking_capacity_drops_for_memory_and_growing_it_lets_waiters_in():
    r = Replay(auto())
    with_footprints(r, 0, A=4, B=4, C=4)
    r(0, "request", "A")
    r(1, "request", "B")
    r(2, "request", "C")
    assert r(3, "set_capacity", 6 * GiB) == [Drop("B", M, evict=True)]
    assert r(4, "release", "B") == []
    assert r(5, "set_capacity", 12 * GiB) == [Grant("C", TQ)]


def test_draining_holders_count_until_they_release():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(TQ, "tick") == [Drop("A", Q, evict=True)]
    assert r(TQ + 1, "set_footprint", "B", 5 * GiB) == []  # B shrank, but A still counts
    assert r(TQ + 2, "set_footprint", "B", 4 * GiB) == [Grant("B", TQ)]  # 6 + 4: fits beside A


def test_a_silent_dropped_holder_is_reported_then_evicted_and_the_waiter_runs():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    play(r, [
        (0, "request", "A", [Grant("A", TQ)]),
        (1, "request", "B", []),
        (TQ, "tick", [Drop("A", Q, evict=True)]),
        (2 * TQ, "tick", [Overdue("A", TQ)]),
        (3 * TQ - 0.01, "tick", []),
        (3 * TQ, "tick", [Evict("A", 2 * TQ), Grant("B", TQ)]),
        (3 * TQ + 1, "release", "A", []),          # a late answer from the evicted client
        (3 * TQ + 1, "disconnect", "A", []),
    ])


def test_disconnect_of_a_draining_holder_frees_its_room_at_once():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "request", "A")
    r(1, "request", "B")
    r(TQ, "tick")
    assert r(TQ + 1, "disconnect", "A") == [Grant("B", TQ)]


def test_disconnect_of_a_blocked_waiter_unblocks_those_behind_it():
    r = Replay(auto())
    with_footprints(r, 0, A=4, big=8, s1=1, s2=1, s3=1, s4=1)
    r(0, "request", "A")
    r(1, "request", "big")
    for t, c in enumerate(["s1", "s2", "s3", "s4"], start=2):
        r(t, "request", c)
    assert r.arb.state_of("s4") == "waiting"
    assert r(7, "disconnect", "big") == [Grant("s4", TQ)]


def test_disconnect_forgets_footprint_priority_and_eviction():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "set_priority", "A", 3)
    r(0, "request", "B")
    r(1, "request", "A")
    assert r.actions[-1][1] == Drop("B", P, evict=True)
    r(2, "release", "B")
    r(3, "disconnect", "B")
    assert (r.arb.footprint("B"), r.arb.priority("B")) == (0, 0)
    assert r(4, "request", "B") == [Grant("B", TQ, prefetch=False)]  # 0 bytes fit beside A
    r(5, "disconnect", "A")
    assert r.arb.priority("A") == 0 and r.arb.footprint("A") == 0


def test_release_and_request_that_do_not_apply_are_ignored():
    r = Replay(auto())
    with_footprints(r, 0, A=6, B=6)
    r(0, "request", "A")
    r(1, "request", "B")
    play(r, [
        (2, "release", "B", []),                   # only waits
        (2, "release", "Z", []),                   # unknown
        (3, "request", "A", []),                   # already holds
        (3, "request", "B", []),                   # already waits
        (4, "disconnect", "Z", []),
    ])
    assert r.arb.queue == ["B"] and list(r.arb.holders) == ["A"]


def test_releasing_holder_lets_every_fitting_waiter_in_at_once():
    r = Replay(auto())
    with_footprints(r, 0, A=10, B=3, C=3, D=3, E=3)
    r(0, "request", "A")
    for c in "BCDE":
        r(1, "request", c)
    assert r(2, "release", "A") == [Grant("B", TQ), Grant("C", TQ), Grant("D", TQ)]


# -- mode changes ---------------------------------------------------------------------------------
def test_serial_to_auto_keeps_the_holder_and_admits_what_fits():
    r = Replay(Arbiter(Mode.SERIAL, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    with_footprints(r, 0, A=4, B=4, C=4)
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    assert r(3, "set_mode", Mode.AUTO) == [Grant("B", TQ)]
    assert r.arb.next_deadline() == TQ           # A keeps its quantum


def test_off_to_auto_gives_holders_a_quantum_and_drops_for_memory():
    r = Replay(Arbiter(Mode.OFF, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    with_footprints(r, 0, A=4, B=4, C=4)
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    assert r(5, "set_mode", Mode.AUTO) == [Drop("C", M, evict=True)]
    assert r.arb.next_deadline() == 5 + TQ
    r(6, "release", "C")
    r(7, "request", "C")
    assert r(5 + TQ, "tick") == [Drop("A", Q, evict=True)]


def test_auto_to_serial_keeps_the_first_holder_and_drops_the_others():
    r = Replay(auto())
    with_footprints(r, 0, A=4, B=4)
    r(0, "request", "A")
    r(1, "request", "B")
    assert r(2, "set_mode", Mode.SERIAL) == [Drop("B", DropReason.ADMIN, evict=False)]


def test_auto_to_serial_gives_an_expired_holder_a_fresh_quantum():
    r = Replay(auto())
    r(0, "request", "A")
    r(TQ, "tick")
    assert r.arb.holders["A"].expired
    assert r(TQ + 1, "set_mode", Mode.SERIAL) == []
    assert r(TQ + 2, "request", "B") == []
    assert r(2 * TQ + 1, "tick") == [Drop("A", Q)]


def test_auto_to_off_grants_every_waiter():
    r = Replay(auto())
    with_footprints(r, 0, A=8, B=8, C=8)
    for t, c in enumerate("ABC"):
        r(t, "request", c)
    assert r(3, "set_mode", Mode.OFF) == [Grant("B", 0.0), Grant("C", 0.0)]


def test_an_admin_dropped_holder_still_draining_is_evicted_in_auto_too():
    r = Replay(Arbiter(Mode.OFF, TQ, capacity=10 * GiB, reserve=0, client_overhead=0))
    r(0, "request", "A")
    r(0, "request", "B")
    r(1, "set_mode", Mode.SERIAL)                # B dropped
    r(2, "set_mode", Mode.OFF)                   # no timers in off
    assert r(3, "set_mode", Mode.AUTO) == []
    assert r.arb.next_deadline() == 3 + TQ
    assert r(3 + TQ, "tick") == [Overdue("B", 2 + TQ)]
    assert r(1 + 2 * TQ, "tick") == [Evict("B", 2 * TQ)]


# -- describe() -----------------------------------------------------------------------------------
def test_describe_says_what_applies_and_why():
    r = Replay(auto())
    d = r.arb.describe(0)
    assert (d["operation"], d["used"], d["budget"], d["blocked"]) == ("idle", 0, 10 * GiB, [])
    assert (d["tq"], d["tq_source"], d["switch_cost"]) == (TQ, "explicit", None)
    with_footprints(r, 0, A=4, B=4, C=4)
    r(0, "request", "A")
    d = r.arb.describe(0)
    assert d["operation"] == "exclusive" and "fits" in d["why"] and d["used"] == 4 * GiB
    r(1, "request", "B")
    d = r.arb.describe(1)
    assert d["operation"] == "concurrent" and "2 clients fit together" in d["why"]
    r(2, "request", "C")
    d = r.arb.describe(2)
    assert d["operation"] == "concurrent" and d["blocked"] == ["C"]  # A and B still run together
    assert "1 waiting" in d["why"] and "4.0 GiB" in d["why"] and "2.0 GiB left" in d["why"]
    assert "does not fit" in d["why"]
    r(TQ, "tick")                                  # A dropped for C, drains
    d = r.arb.describe(TQ)
    assert d["operation"] == "serialised" and d["used"] == 8 * GiB  # draining A still counts
    r(TQ + 1, "release", "A")
    d = r.arb.describe(TQ + 1)
    assert d["operation"] == "concurrent" and d["blocked"] == []


def test_describe_a_client_running_alone_because_it_is_too_big():
    r = Replay(auto())
    with_footprints(r, 0, A=12)
    r(0, "request", "A")
    d = r.arb.describe(0)
    assert d["operation"] == "exclusive" and "alone" in d["why"]


@pytest.mark.parametrize("mode, expected", [
    (Mode.SERIAL, ["idle", "exclusive", "serialised"]),
    (Mode.OFF, ["idle", "exclusive", "concurrent"]),
])
def test_describe_in_serial_and_off(mode, expected):
    r = Replay(Arbiter(mode, TQ))
    seen = [r.arb.describe(0)["operation"]]
    r(0, "request", "A")
    seen.append(r.arb.describe(0)["operation"])
    r(1, "request", "B")
    d = r.arb.describe(1)
    seen.append(d["operation"])
    assert seen == expected
    assert mode.value in d["why"]
    assert d["blocked"] == (["B"] if mode == Mode.SERIAL else [])
