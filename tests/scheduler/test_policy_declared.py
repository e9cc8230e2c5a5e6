"""What a client's declaration of itself counts for (policy/declared.py, policy/owners.py):
table-driven cases; an owner's waiters in their own order in the places they hold; and the
invariant in seeded simulated runs (test_policy_shares_sim.Sim, every call checked by Replay): no
self-declaration of priority or share by one user's non-admin processes raises that user's part of
the GPU's time against another user's, in serial and auto modes, their own order among themselves
included; an admin's setting may."""

from __future__ import annotations

import random

import pytest

from xpushare.scheduler.policy import (
    DEFAULT_SHARE, Arbiter, Mode, claimed_priority, own_shares, raises,
)

from test_policy_replay import GiB
from test_policy_shares_sim import Sim

TOLERANCE = 0.03
SCENES = [("serial", None), ("auto", 8 * GiB), ("auto", 40 * GiB)]


@pytest.mark.parametrize("declared, governed, counts", [
    (1000, False, 0), (1, False, 0), (0, False, 0), (-1, False, -1), (-1000, False, -1000),
    (1000, True, 1000), (-3, True, -3),
])
def test_priority(declared, governed, counts):
    assert claimed_priority(declared, governed) == counts


@pytest.mark.parametrize("declared, counts", [
    ({}, {}), ({"a": 1e6}, {"a": 1.0}), ({"a": 1.001}, {"a": 1.0}), ({"a": 1.0}, {"a": 1.0}),
    ({"a": 0.5}, {"a": 0.5}), ({"a": 30, "b": 70}, {"a": 30 / 70, "b": 1.0}),
    ({"a": 0.5, "b": 0.25}, {"a": 0.5, "b": 0.25}), ({"a": 4, "b": 0.5}, {"a": 1.0, "b": 0.125}),
])
def test_a_users_declared_shares_keep_their_ratio_the_largest_at_most_the_default(declared, counts):
    assert own_shares(declared) == pytest.approx(counts)


def test_raises_says_when_governance_matters():
    assert raises(1) and raises(declared_share=1.5)
    assert not raises(0) and not raises(-5, 0.5) and not raises(declared_share=None)


def test_an_owners_waiters_take_its_places_in_their_own_order():
    arb = Arbiter(Mode.SERIAL, 10.0)
    for client, owner, own in (("x", "v", 0), ("a1", "a", 0), ("v", "v", 0), ("a2", "a", 1000),
                               ("a3", "a", -5)):
        arb.set_owner(client, owner, own)
    arb.request("x", 0.0)  # holds
    for t, client in enumerate(("a1", "v", "a2", "a3"), start=1):
        arb.request(client, float(t))
    # a's places were 1st and 4th, v's 2nd: a2 (own 1000) takes a's first, a1 the next, a3 the last
    assert arb.order(4.0) == ["a2", "v", "a1", "a3"]
    arb.disconnect("a2", 5.0)
    arb.set_owner("b", None, 1000)  # nobody's: ordered by its priority and arrival alone
    arb.request("b", 6.0)
    assert arb.order(6.0) == ["v", "a1", "a3", "b"]


def _declarations(rng, n):
    """(priority, share) declared by each of n processes: anything the protocol carries."""
    return [(rng.choice([rng.randint(-1000, 1000), 1000, 1, 0, -1]),
             rng.choice([None, 10 ** rng.uniform(-3, 6)])) for _ in range(n)]


def _victims_part(seed, scene, attackers, governed):
    """The victim's part of the GPU's time beside len(attackers) saturating processes of another
    user that declared `attackers` (None: the default)."""
    shares = {"victim": DEFAULT_SHARE}
    prios = {}
    declared = {f"a{i}": d[1] for i, d in enumerate(attackers) if d is not None and d[1] is not None}
    counted = declared if governed else own_shares(declared)
    for i, decl in enumerate(attackers):
        shares[f"a{i}"] = counted.get(f"a{i}", DEFAULT_SHARE)
        prios[f"a{i}"] = claimed_priority(decl[0] if decl is not None else 0, governed)
    sim = Sim(seed, *scene, shares)
    sim.arb.set_owner("victim", "v", 0)
    for i, decl in enumerate(attackers):  # what each declared orders it among its user's
        sim.arb.set_owner(f"a{i}", "a", decl[0] if decl is not None else 0)
    for c, p in prios.items():
        sim.call("set_priority", c, p)
    sim.run(60 * len(shares) * sim.tq)
    return sim.held["victim"] / sum(sim.held.values())


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: f"{s[0]}-{(s[1] or 0) // GiB}GiB")
@pytest.mark.parametrize("seed", range(6))
def test_no_self_declaration_raises_a_users_part_against_another(scene, seed):
    rng = random.Random(seed * 31337 + len(scene[0]))
    n = rng.randint(1, 3)
    declared = _declarations(rng, n)
    baseline = _victims_part(seed, scene, [None] * n, governed=False)
    part = _victims_part(seed, scene, declared, governed=False)
    assert part >= baseline - TOLERANCE, (declared, baseline, part)


def test_an_admins_raise_does_take_from_the_other_user():
    """The invariant has teeth: the same runs with the declarations governed break it."""
    scene, declared = ("serial", None), [(0, 1000.0)]
    baseline = _victims_part(0, scene, [None], governed=False)
    assert _victims_part(0, scene, declared, governed=True) < baseline - TOLERANCE
    assert _victims_part(0, scene, declared, governed=False) >= baseline - TOLERANCE


class _WatchedSet(set):
    """An owner's clients, counting the passes over them."""
    passes = 0

    def __iter__(self):
        self.passes += 1
        return super().__iter__()


@pytest.mark.parametrize("owns", [(0,), (0, 7)], ids=["one-own-priority", "two"])
def test_a_request_does_not_pass_over_all_of_its_users_clients(owns):
    """A thousand processes of one user cycling the lock: a request's reordering among that
    user's waiters looks at the waiters, not at every client the user has on the GPU."""
    arb = Arbiter(Mode.OFF, 10.0)
    clients = [f"c{i}" for i in range(1000)]
    for i, c in enumerate(clients):
        arb.set_owner(c, "u", owns[i % len(owns)])
    watched = arb._owners._clients["u"] = _WatchedSet(arb._owners._clients["u"])
    for t, c in enumerate(clients):
        arb.request(c, float(t))
    for t, c in enumerate(clients):
        arb.release(c, 1000.0 + t)
        arb.request(c, 1000.5 + t)
    assert watched.passes == 0
    assert set(arb.holders) == set(clients)
