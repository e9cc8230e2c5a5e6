"""Compute shares: a weight per client that splits the GPU's time among clients taking turns.

Table-driven tests of the arithmetic (model.scaled_quantum, Arbiter.quantum_of) and of set_share's
validation; scripted sequences of the rules (quanta in proportion to shares whoever happens to wait
at a grant, unequal shares taking turns in auto mode even when they fit, priorities preempting as
ever, retune, disconnect); the read API (snapshot views).
"""

import math

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    DEFAULT_SHARE, TQ_CEILING, TQ_MAX, TQ_MIN, Arbiter, Drop, Grant, Mode, check_share, scaled_quantum,
)

from test_policy_replay import GiB, Replay, auto, play, with_footprints


# -- arithmetic ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tq, ratio, expected", [
    (10.0, 1.0, 10.0),                    # the mean share: tq itself
    (10.0, 0.6, 6.0),
    (10.0, 1.4, 14.0),
    (10.0, 0.1, 1.0),                     # a tenth of tq: the lowest ratio still in proportion
    (10.0, 0.05, 1.0),                    # under it: a tenth of tq
    (10.0, 20.0, 100.0),                  # over ten times: ten times tq
    (2.0, 0.6, 1.2),                      # 30/70 at tq 2 s: 1.2 s and 2.8 s (no TQ_FLOOR)
    (2.0, 1.4, 2.8),
    (60.0, 3.0, TQ_CEILING),              # 180 s would be over the ceiling
    (0.5, 1.0, 0.5),
    (0.5, 0.2, 0.1),
    (0.5, 3.0, 1.5),
    (300.0, 1.0, 300.0),                  # tq over the ceiling: tq is the upper bound
    (300.0, 2.0, 300.0),
    (300.0, 0.5, 150.0),
    (300.0, 0.001, 30.0),
    (120.0, 1.5, TQ_CEILING),
    (TQ_MIN, 0.01, TQ_MIN),               # never under what the wire can carry ...
    (TQ_MAX, 5.0, TQ_MAX),                # ... nor over it
])
def test_scaled_quantum(tq, ratio, expected):
    assert scaled_quantum(tq, ratio) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tq, shares, expected", [
    # shares of the holders and waiters -> the quantum of each
    (10.0, {"A": 30, "B": 70}, {"A": 6.0, "B": 14.0}),
    (10.0, {"A": 1, "B": 1, "C": 2}, {"A": 7.5, "B": 7.5, "C": 15.0}),
    (10.0, {"A": 0.1, "B": 0.1, "C": 0.1}, {"A": 10.0, "B": 10.0, "C": 10.0}),  # equal: exactly tq
    (10.0, {"A": 3.7}, {"A": 10.0}),                                            # alone: tq
    (10.0, {"A": None, "B": 3}, {"A": 5.0, "B": 15.0}),                         # None: 1.0
    (10.0, {"A": 0.1, "B": 10}, {"A": 1.0, "B": 10.0 * 10 / 5.05}),            # the floor bites
    (100.0, {"A": 1, "B": 9}, {"A": 20.0, "B": TQ_CEILING}),                    # the ceiling bites
])
def test_quantum_of_scales_tq_by_share_over_mean_share(tq, shares, expected):
    arb = Arbiter(Mode.SERIAL, tq)
    for c, share in shares.items():
        arb.set_share(c, share, 0.0)
    for c in shares:
        arb.request(c, 0.0)
    assert arb.mean_share() == pytest.approx(
        sum(DEFAULT_SHARE if s is None else s for s in shares.values()) / len(shares))
    for c, q in expected.items():
        assert arb.quantum_of(c) == pytest.approx(q, rel=1e-12), c
        if len({DEFAULT_SHARE if s is None else s for s in shares.values()}) == 1:
            assert arb.quantum_of(c) == tq  # exactly, not nearly


def test_equal_shares_give_exactly_tq_whatever_their_float_sum():
    """0.1 * 3 is not 0.3 in floating point; the quantum is still exactly tq."""
    arb = Arbiter(Mode.SERIAL, 7.3)
    for i in range(7):
        arb.set_share(f"c{i}", 0.1, 0.0)
        arb.request(f"c{i}", 0.0)
    arb.disconnect("c3", 1.0)
    assert all(arb.quantum_of(f"c{i}") == 7.3 for i in range(7))


@pytest.mark.parametrize("share", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, "2", True,
                                   False, [1], object()])
def test_set_share_refuses_what_is_not_a_finite_number_over_zero(share):
    arb = Arbiter(Mode.SERIAL, 10.0)
    arb.set_share("A", 2.0, 0.0)
    with pytest.raises(ValueError):
        arb.set_share("A", share, 1.0)
    with pytest.raises(ValueError):
        check_share(share)
    assert arb.share("A") == 2.0  # unchanged


@pytest.mark.parametrize("share, expected", [
    (None, DEFAULT_SHARE), (1, 1.0), (2, 2.0), (0.25, 0.25), (1e-9, 1e-9), (1e9, 1e9),
])
def test_set_share_takes_a_finite_number_over_zero_or_none(share, expected):
    arb = Arbiter(Mode.SERIAL, 10.0)
    assert arb.set_share("A", share, 0.0) == []
    assert arb.share("A") == expected == check_share(share)
    assert type(arb.share("A")) is float


# -- serial mode --------------------------------------------------------------------------------
def test_two_busy_clients_of_shares_30_and_70_get_quanta_of_0_6_and_1_4_tq():
    """Each releases at its drop and asks again right after (so at the other's grant it is not
    waiting yet): the quantum of the one granted is worked out again when the other asks."""
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "A", 30)
    r(0, "set_share", "B", 70)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),       # alone: tq
        (1, "request", "B", []),                       # A's quantum is now 6 s from 0
        (6, "tick", [Drop("A", DropReason.QUANTUM)]),
        (6.1, "release", "A", [Grant("B", 10.0)]),     # alone again at its grant ...
        (6.1, "request", "A", []),                     # ... 14 s from 6.1 once A asks
    ])
    assert r.arb.next_deadline() == pytest.approx(20.1)
    play(r, [
        (20.1, "tick", [Drop("B", DropReason.QUANTUM)]),
        (20.2, "release", "B", [Grant("A", 10.0)]),
        (20.2, "request", "B", []),
    ])
    assert r.arb.next_deadline() == pytest.approx(26.2)


def test_a_client_granted_while_the_other_waits_gets_its_scaled_quantum_at_once():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "B", 3)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", []),
        (5, "tick", [Drop("A", DropReason.QUANTUM)]),   # A: 1 / 2 of tq
        (5, "request", "C", []),
        (5.5, "release", "A", [Grant("B", 10.0 * 3 / 2)]),  # A has left: mean of B and C
    ])


def test_a_quantum_cut_short_by_a_new_mean_expires_at_once():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "B", 9)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (4, "request", "B", [Drop("A", DropReason.QUANTUM)]),  # A's quantum is now 2 s: over
    ])


def test_early_release_leaves_the_rest_to_the_others():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "A", 3)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", []),                      # A: 15 s
        (2, "release", "A", [Grant("B", 10.0)]),      # idle after 2 s: B at once, alone
    ])
    assert r.arb.next_deadline() == 12.0


def test_retune_gives_fresh_share_scaled_quanta():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "A", 3)
    r(0, "request", "A")
    r(0, "request", "B")
    assert r.arb.next_deadline() == 15.0
    r(4, "set_tq", 2.0)
    assert r.arb.next_deadline() == 4 + 3.0   # 2 s scaled by 3 / 2, from the change


def test_set_share_of_a_holder_moves_its_deadline():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "request", "A")
    r(0, "request", "B")
    assert r.arb.next_deadline() == 10.0
    r(1, "set_share", "A", 4)
    assert r.arb.next_deadline() == 16.0
    r(2, "set_share", "A", None)
    assert r.arb.next_deadline() == 10.0


def test_priorities_preempt_whatever_the_shares():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    r(0, "set_share", "A", 100)
    r(0, "set_priority", "B", 1)
    r(0, "set_share", "B", 0.1)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (1, "request", "B", [Drop("A", DropReason.PREEMPTED)]),
        (1.1, "release", "A", [Grant("B", 10.0)]),
    ])


def test_disconnect_forgets_the_share():
    arb = Arbiter(Mode.SERIAL, 10.0)
    arb.set_share("A", 5, 0)
    arb.request("A", 0)
    arb.request("B", 0)
    arb.disconnect("A", 1)
    assert arb.share("A") == DEFAULT_SHARE
    assert arb.mean_share() == 1.0
    arb.disconnect("B", 1)
    assert arb.mean_share() is None


def test_snapshot_shows_each_clients_share():
    arb = Arbiter(Mode.SERIAL, 10.0)
    arb.set_share("A", 2.5, 0)
    arb.request("A", 0)
    arb.request("B", 0)
    s = arb.snapshot(1)
    assert [(h.client, h.share) for h in s.holders] == [("A", 2.5)]
    assert [(w.client, w.share) for w in s.waiters] == [("B", DEFAULT_SHARE)]


# -- auto mode ----------------------------------------------------------------------------------
def test_auto_equal_shares_run_together_as_ever():
    r = Replay(auto(tq=10.0))
    with_footprints(r, 0, A=2, B=2)
    r(0, "set_share", "A", 3)
    r(0, "set_share", "B", 3)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", [Grant("B", 10.0)]),
    ])


@pytest.mark.parametrize("capacity", [10 * GiB, 0])
def test_auto_unequal_shares_take_turns_even_when_they_fit(capacity):
    r = Replay(auto(capacity=capacity, tq=10.0))
    with_footprints(r, 0, A=2, B=2, C=2)
    r(0, "set_share", "B", 3)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (1, "request", "B", []),                           # fits, but its share differs
        (1, "request", "C", []),                           # behind B: B is a barrier
    ])
    assert r.arb.next_deadline() == 6.0                    # A: 10 * 1 / (5 / 3), from 0
    play(r, [
        (6, "tick", [Drop("A", DropReason.QUANTUM)]),
        (6.1, "release", "A", [Grant("B", 10.0 * 3 / 2)]),  # mean of B and C: 2
        (6.1, "request", "A", []),                         # B's share differs: A waits ...
    ])
    assert list(r.arb.queue) == ["C", "A"]                 # ... as C does


def test_auto_unequal_shares_drop_without_evict_when_they_fit_and_with_it_when_not():
    r = Replay(auto(tq=10.0))
    with_footprints(r, 0, A=2, B=2)
    r(0, "set_share", "B", 2)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", []),
        (7, "tick", [Drop("A", DropReason.QUANTUM, evict=False)]),   # 10 * 1 / 1.5
        (7.1, "release", "A", [Grant("B", 10.0)]),
    ])
    r2 = Replay(auto(tq=10.0))
    with_footprints(r2, 0, A=6, B=6)
    r2(0, "set_share", "B", 2)
    play(r2, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", []),
        (7, "tick", [Drop("A", DropReason.QUANTUM, evict=True)]),
    ])


def test_auto_a_share_set_on_one_of_two_running_holders_splits_them():
    r = Replay(auto(tq=10.0))
    with_footprints(r, 0, A=2, B=2)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (0, "request", "B", [Grant("B", 10.0)]),
        (1, "set_share", "B", 2, [Drop("B", DropReason.ADMIN)]),   # A was granted first: it stays
    ])


def test_auto_a_higher_priority_of_another_share_preempts():
    r = Replay(auto(tq=10.0))
    with_footprints(r, 0, A=2, B=2)
    r(0, "set_share", "B", 0.5)
    r(0, "set_priority", "B", 2)
    play(r, [
        (0, "request", "A", [Grant("A", 10.0)]),
        (1, "request", "B", [Drop("A", DropReason.PREEMPTED)]),
    ])


def test_off_mode_ignores_shares():
    r = Replay(Arbiter(Mode.OFF, 10.0))
    r(0, "set_share", "A", 5)
    play(r, [
        (0, "request", "A", [Grant("A", 0.0)]),
        (0, "request", "B", [Grant("B", 0.0)]),
    ])
    assert r.arb.next_deadline() is None
