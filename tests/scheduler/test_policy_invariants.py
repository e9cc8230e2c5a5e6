"""Seeded random event sequences: the invariants Replay checks hold after every call, in every mode,
and once new requests stop, every waiter is served (nobody starves, nothing gets stuck). Some
sequences also set compute shares (World(shares=True)).
"""

import random

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Evict, Grant, Mode, Overdue, SwitchReport

from test_policy_replay import GiB, Replay

CLIENTS = [f"c{i}" for i in range(7)]
STEPS = 600


class World:
    """Clients that ask, grow, shrink, answer drops (a few stay silent) and disconnect at random."""

    def __init__(self, seed: int, mode: Mode, shares: bool = False):
        self.rng = rng = random.Random(seed)
        self.shares = shares   # compute shares are set now and then
        self.shares_set: set = set()
        self.capacity = rng.choice([0, 8 * GiB, 16 * GiB, 40 * GiB])
        arb = Arbiter(mode, rng.choice([None, 0.5, 3.0]), capacity=self.capacity,
                      reserve=rng.choice([None, 0, GiB]),
                      client_overhead=rng.choice([0, 768 * 2**20]))
        self.r = Replay(arb)
        self.now = 0.0
        self.silent: set = set()   # clients that will never answer DROP_LOCK

    @property
    def arb(self) -> Arbiter:
        return self.r.arb

    def call(self, op, *args, **kw):
        actions = self.r(self.now, op, *args, **kw)
        for a in actions:
            if isinstance(a, Evict):  # the server closes the evicted client's connection
                self.r(self.now, "disconnect", a.client)
                self.silent.discard(a.client)
        return actions

    def random_event(self):
        rng, arb = self.rng, self.arb
        self.now += rng.choice([0.0, 0.001, 0.05, 0.3, 1.0, 4.0])
        deadline = arb.next_deadline()
        if deadline is not None and deadline <= self.now:
            self.call("tick")
        c = rng.choice(CLIENTS)
        draining = [h for h, s in arb.holders.items() if s.drop_sent is not None
                    and h not in self.silent]
        event = rng.choices(
            ["request", "release_dropped", "release_idle", "footprint", "priority", "disconnect",
             "tick", "mode", "tq", "capacity", "go_silent", "share"],
            weights=[30, 25, 6, 15, 6, 3, 8, 2, 2, 1, 1, 6 if self.shares else 0])[0]
        if event == "request":
            self.call("request", c)
        elif event == "release_dropped" and draining:
            who = rng.choice(draining)
            self.call("release", who, report=SwitchReport(drain=0.01, evict=rng.choice([0.0, 0.1]),
                                                   prefetch=rng.choice([0.0, 0.05])))
        elif event == "release_idle" and arb.holders:
            self.call("release", rng.choice(list(arb.holders)))
        elif event == "footprint":
            top = max(self.capacity, 8 * GiB)
            self.call("set_footprint", c, rng.randrange(0, top // 2 + 1, GiB // 4))
        elif event == "priority":
            self.call("set_priority", c, rng.randint(-2, 3))
        elif event == "disconnect":
            self.call("disconnect", c)
            self.silent.discard(c)
        elif event == "tick":
            self.call("tick")
        elif event == "mode":
            self.call("set_mode", rng.choice(list(Mode)))
        elif event == "tq":
            self.call("set_tq", rng.choice([None, 0.2, 2.0]))
        elif event == "capacity":
            self.capacity = rng.choice([0, 8 * GiB, 16 * GiB])
            self.call("set_capacity", self.capacity)
        elif event == "go_silent":
            self.silent.add(c)
        elif event == "share":
            share = rng.choice([None, 0.1, 0.5, 1.0, 2.0, 3.7, 10.0])
            self.shares_set.add(share)
            self.call("set_share", c, share)

    def drain(self, rounds: int = 5000):
        """No new requests; dropped clients answer promptly; time runs to each deadline."""
        for _ in range(rounds):
            if not self.arb.waiting:
                return
            answered = False
            for c, h in list(self.arb.holders.items()):
                if h.drop_sent is not None and c not in self.silent:
                    self.now += 0.01
                    self.call("release", c)
                    answered = True
            if answered:
                continue
            deadline = self.arb.next_deadline()
            assert deadline is not None, (
                f"stuck: {self.arb.queue} wait, holders {self.arb.holders}, nothing is timed")
            self.now = max(self.now, deadline)
            self.call("tick")
        pytest.fail(f"waiters {self.arb.queue} still not served after {rounds} rounds")


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_keep_the_invariants_and_serve_everyone(seed, mode):
    w = World(seed * 31 + len(mode.value), mode)
    for _ in range(STEPS):
        w.random_event()
    w.drain()
    assert not w.arb.waiting
    assert len(w.r.granted) > 20  # the sequence did exercise the arbiter


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_with_shares_keep_the_invariants_and_serve_everyone(seed, mode):
    """The same with compute shares set at random: in auto mode, unequal shares take turns (Replay
    checks that no two running holders have unequal shares, and each grant's share-scaled
    quantum)."""
    w = World(seed * 37 + 1000 + len(mode.value), mode, shares=True)
    for _ in range(STEPS):
        w.random_event()
    w.drain()
    assert not w.arb.waiting
    assert len(w.r.granted) > 20
    assert len(w.shares_set) > 3   # shares did differ


def test_the_random_sequences_reach_every_kind_of_decision():
    """So that the invariant test above is not vacuous: across its seeds, auto mode grants with and
    without PREFETCH, drops for every reason with and without EVICT, reports and evicts silent
    ones."""
    seen = set()
    for seed in range(12):
        w = World(seed * 31 + len(Mode.AUTO.value), Mode.AUTO)
        for _ in range(STEPS):
            w.random_event()
        for _, a in w.r.actions:
            if isinstance(a, Grant):
                seen.add(("grant", a.prefetch))
            elif isinstance(a, Drop):
                seen.add((a.reason, a.evict))
            else:
                seen.add(type(a))
    expected = {("grant", False), ("grant", True), Overdue, Evict,
                (DropReason.QUANTUM, True), (DropReason.PREEMPTED, True), (DropReason.MEMORY, True),
                (DropReason.ADMIN, False), (DropReason.QUANTUM, False)}  # from serial spells
    assert expected <= seen, expected - seen


@pytest.mark.parametrize("seed", range(8))
def test_busy_clients_that_do_not_fit_together_all_get_their_share(seed):
    """Always-busy clients in auto mode (each asks again right after releasing): every one of them
    holds the GPU for a fair part of the time, whatever the sizes and priorities (aging lets the
    low ones in, and keeps them in)."""
    rng = random.Random(seed)
    arb = Arbiter(Mode.AUTO, 1.0, capacity=16 * GiB, reserve=0, client_overhead=0)
    r = Replay(arb)
    clients = CLIENTS[:5]
    held, start = dict.fromkeys(clients, 0.0), {}
    now = 0.0

    def call(op, *args):
        for a in r(now, op, *args):
            if isinstance(a, Grant):
                start[a.client] = now

    for c in clients:
        # at least 4 GiB each: 5 of them never all fit in 16 GiB
        call("set_footprint", c, rng.choice([4, 6, 10, 20]) * GiB)
        call("set_priority", c, rng.choice([0, 0, 1, 2]))
    for c in clients:
        call("request", c)
    for _ in range(3000):
        draining = [c for c, h in arb.holders.items() if h.drop_sent is not None]
        now += 0.01
        if draining:
            c = draining[0]
            held[c] += now - start.pop(c)
            call("release", c)
            call("request", c)
            continue
        deadline = arb.next_deadline()
        assert deadline is not None, "busy clients wait but nothing is timed"
        now = max(now, deadline)
        call("tick")
    for c, since in start.items():
        held[c] += now - since
    shares = {c: round(held[c] / now, 3) for c in clients}
    assert min(shares.values()) >= 0.05, shares
