"""Residency is granted, never declared, and a loop of slow answers ends (policy/backoff.py; issue
33, item 1). Scripted replays, time injected; 16 GiB, no reserve, no context overhead, as in
test_policy_residency.py; A and B belong to user "mallory", W to "alice"."""

import random

import pytest

from xpushare.scheduler.policy import Backoff, Evict, Grant, Mode, Reclaim
from xpushare.scheduler.policy.backoff import BACKOFF_DOUBLINGS, BACKOFF_QUANTA

from test_policy_replay import GiB, play
from test_policy_residency import TQ, park, swap


def turn(r, now, *clients):
    """Each client holds the GPU once (brought back with PREFETCH or not) and releases."""
    for c in clients:
        assert [(type(a), a.client) for a in r(now, "request", c)] == [(Grant, c)]
        assert r(now + 0.5, "release", c) == []
        now += 1
    return now


def users(r, **owners):
    for c, owner in owners.items():
        r.arb.set_owner(c, owner, 0)
    return r


def attacked(mode=Mode.AUTO, **sizes):
    return users(swap(mode, swappable="AB", **(sizes or {"A": 8, "B": 4, "W": 12})),
                 A="mallory", B="mallory", W="alice")


@pytest.mark.parametrize("mode", [Mode.AUTO, Mode.SERIAL])
def test_a_report_from_an_idle_client_lowers_what_it_is_counted_for_never_raises_it(mode):
    r = attacked(mode)
    now = park(r, 0, "A")
    play(r, [(now, "request", "W", [Reclaim("A")]),
             (now + 0.1, "residency", "A", 0, [Grant("W", TQ)]),
             (now + 0.2, "residency", "A", 8 * GiB, []),     # "back on the GPU": unasked
             (now + 0.3, "release", "W", []),
             (now + 0.4, "request", "W", [Grant("W", TQ)])])  # nobody to wait for
    assert r.arb.resident_bytes("A") == 0


def test_an_idle_client_that_never_held_counts_nothing_whatever_it_reports():
    r = attacked()
    assert r(0, "residency", "A", 8 * GiB) == []
    assert r.arb.resident_bytes("A") == 0 and r(1, "request", "W") == [Grant("W", TQ)]


def test_a_late_answer_costs_the_owner_its_idle_residency_and_the_bar_doubles():
    r = attacked()
    now = park(r, 0, "A")
    late = TQ + 1
    play(r, [(now, "request", "W", [Reclaim("A")]),
             (now + late, "residency", "A", 0, [Backoff("A", late, BACKOFF_QUANTA * TQ),
                                                Grant("W", TQ)]),
             (now + late + 1, "release", "W", [])])
    now += late + 2
    turn(r, now, "A", "B")                          # its user's clients: their bytes count no more
    assert r.arb.resident_total() == 0
    assert r(now + 3, "request", "W") == [Grant("W", TQ)]
    r(now + 4, "release", "W")
    # Once the bar has passed, a release counts again; the next late answer bars twice as long
    now = 1 + late + BACKOFF_QUANTA * TQ + 1
    turn(r, now, "A")
    assert r.arb.resident_bytes("A") == 8 * GiB
    play(r, [(now + 1, "request", "W", [Reclaim("A")]),
             (now + 1 + late, "residency", "A", 0,
              [Backoff("A", late, 2 * BACKOFF_QUANTA * TQ), Grant("W", TQ)])])


def test_a_timely_answer_takes_a_strike_away():
    r = attacked()
    now = park(r, 0, "A")
    r(now, "request", "W")
    late = TQ + 1
    assert r(now + late, "residency", "A", 0)[0] == Backoff("A", late, BACKOFF_QUANTA * TQ)
    r(now + late + 1, "release", "W")
    now += late + BACKOFF_QUANTA * TQ + 1          # the bar is over
    turn(r, now, "A")
    play(r, [(now + 1, "request", "W", [Reclaim("A")]),
             (now + 1.5, "residency", "A", 0, [Grant("W", TQ)]),     # timely: the strike goes
             (now + 2, "release", "W", [])])
    turn(r, now + 3, "A")
    play(r, [(now + 4, "request", "W", [Reclaim("A")]),            # late again: a first strike
             (now + 4 + late, "residency", "A", 0, [Backoff("A", late, BACKOFF_QUANTA * TQ),
                                                    Grant("W", TQ)])])


def test_a_silent_client_that_comes_back_as_another_connection_makes_nobody_wait():
    r = attacked(A=8, W=12, A2=8)
    users(r, A2="mallory")
    r(0, "set_swappable", "A2", True)
    now = park(r, 0, "A")
    assert r(now, "request", "W") == [Reclaim("A")]
    gone = now + 2 * TQ
    assert r(gone, "tick") == [Evict("A", 2 * TQ), Backoff("A", 2 * TQ, BACKOFF_QUANTA * TQ),
                               Grant("W", TQ)]
    r(gone, "disconnect", "A")
    r(gone + 1, "release", "W")
    turn(r, gone + 2, "A2")                         # the same user, reconnected
    assert r(gone + 4, "request", "W") == [Grant("W", TQ)]


def test_another_users_clients_keep_their_idle_residency():
    r = users(swap(A=8, C=5, W=12, swappable="AC"), A="mallory", C="carol", W="alice")
    now = park(r, 0, "A")
    r(now, "request", "W")
    r(now + TQ + 1, "residency", "A", 0)            # mallory's strike
    r(now + TQ + 2, "release", "W")
    turn(r, now + TQ + 3, "C")
    assert r.arb.resident_bytes("C") == 5 * GiB     # carol's bytes count as ever
    assert r(now + TQ + 5, "request", "W") == [Reclaim("C")]


def test_the_bar_stops_doubling():
    from xpushare.scheduler.policy.backoff import Strikes
    strikes = Strikes()
    bars = [strikes.strike("u", 0.0, 1.0) for _ in range(BACKOFF_DOUBLINGS + 3)]
    assert bars[:3] == [BACKOFF_QUANTA, 2 * BACKOFF_QUANTA, 4 * BACKOFF_QUANTA]
    assert bars[-1] == bars[-2] == BACKOFF_QUANTA * 2 ** BACKOFF_DOUBLINGS


@pytest.mark.parametrize("seed", range(20))
def test_random_reports_never_raise_an_idle_clients_count(seed):
    """Whatever idle clients report, in any order, with or without being asked, nothing they say
    raises what they are counted for: only a release does."""
    rng = random.Random(seed)
    r = attacked(A=6, B=5, W=9)
    now = 0.0
    for _ in range(300):
        now += rng.choice([0.0, 0.01, 0.5, TQ, 1.5 * TQ])
        deadline = r.arb.next_deadline()
        if deadline is not None and deadline <= now:
            r(now, "tick")                          # the server's timer fires first
        c = rng.choice("ABW")
        before = {x: r.arb.resident_bytes(x) for x in "ABW" if not r.arb.holds(x)}
        op = rng.choice(["report", "report", "request", "release", "tick"])
        if op == "report":
            released = False
            r(now, "residency", c, rng.choice([0, 1, 6, 64]) * GiB, refused=rng.random() < 0.1)
        elif op == "request":
            released = False
            r(now, "request", c)
        elif op == "release":
            released = r.arb.holds(c)
            r(now, "release", c)
        else:
            released = False
            r(now, "tick")
        for x, n in before.items():
            if not (released and x == c) and not r.arb.holds(x):
                assert r.arb.resident_bytes(x) <= n, (seed, now, op, c, x)
