"""Compute shares in simulated time: seeded runs of 2 to 5 clients with random shares (0.1 to 10,
log-uniform) that contend for one GPU for hundreds of quanta, in serial mode and in auto mode
(whether their memory fits together or not), every call checked by Replay.

- Saturating clients (they hold until dropped, answer the drop after a short handoff and ask again
  at once) get GPU time in proportion to their shares: within TOLERANCE of share / sum(shares).
  Where the shares are so far apart that a quantum meets the bounds of model.scaled_quantum, in
  proportion to the bounded quanta instead (the runs pick tq so that this is rare).
- Clients that release early (idle before their quantum ends) leave the rest to the others: the
  GPU is never idle while somebody waits, and the saturating clients still split what they get in
  proportion to their shares.
- A client of higher priority preempts at its request whatever the shares.
"""

from __future__ import annotations

import heapq
import math
import random

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    SHARE_RATIO_MAX, SHARE_RATIO_MIN, TQ_CEILING, Arbiter, Drop, Evict, Grant, Mode, scaled_quantum,
)

from test_policy_replay import GiB, Replay

TOLERANCE = 0.03    # of the GPU's time, between a client's part and its share's part
HANDOFF = 0.01      # seconds from DROP_LOCK to LOCK_RELEASED
ROUNDS = 150        # turns of every client, about, per run
SCENES = [("serial", None), ("auto", 40 * GiB), ("auto", 8 * GiB), ("auto", 0)]
SEEDS = range(6)


def _shares(rng, n):
    return [round(10 ** rng.uniform(-1, 1), 3) for _ in range(n)]


def _pick_tq(shares):
    """A quantum for which no client's scaled quantum meets a bound, when there is one; and
    whether there is."""
    mean = sum(shares) / len(shares)
    if min(shares) / mean < SHARE_RATIO_MIN or max(shares) / mean > SHARE_RATIO_MAX:
        return 10.0, False
    return min(10.0, TQ_CEILING * mean / max(shares)), True


class Sim:
    """One GPU, saturating and bursty clients, time driven by the arbiter's deadlines."""

    def __init__(self, seed, mode, capacity, shares, bursty=(), vip=None):
        self.rng = random.Random(seed)
        self.shares = shares
        self.tq, self.unbounded = _pick_tq(list(shares.values()))
        kw = {} if capacity is None else dict(capacity=capacity, reserve=0, client_overhead=0)
        self.r = Replay(Arbiter(Mode(mode), self.tq, **kw))
        self.bursty, self.vip = set(bursty), vip
        self.now = 0.0
        self.events: list = []           # (time, seq, kind, client)
        self.seq = 0
        self.start: dict = {}            # holder -> when it got the GPU
        self.held = dict.fromkeys(shares, 0.0)
        self.busy = 0.0                  # time with at least one holder
        self.idle_waiting = 0.0          # time with nobody holding while somebody waits
        self.preemptions_checked = 0
        for c, share in shares.items():
            self.call("set_share", c, share)
            if capacity:
                size = capacity // 4 if capacity >= 16 * GiB else capacity // 2 + GiB
                self.call("set_footprint", c, size)
        if vip is not None:
            self.call("set_priority", vip, 10)
            self.call("set_share", vip, round(10 ** self.rng.uniform(-1, 1), 3))

    @property
    def arb(self):
        return self.r.arb

    def at(self, delay, kind, client):
        self.seq += 1
        heapq.heappush(self.events, (self.now + delay, self.seq, kind, client))

    def call(self, op, *args):
        # the running holders a priority of 10 outranks (a holder's rank counts the aging it had
        # at its grant, which preemptions let it keep)
        before = [c for c in self.arb.live_holders() if self.arb.rank(c) < 10]
        actions = self.r(self.now, op, *args)
        for a in actions:
            if isinstance(a, Grant):
                self.start[a.client] = self.now
                if a.client in self.bursty or a.client == self.vip:
                    # busy for part of its quantum, then idle: it releases early
                    self.at(self.rng.uniform(0.05, 0.9) * a.quantum, "release", a.client)
            elif isinstance(a, Drop):
                self.at(HANDOFF, "release", a.client)
            elif isinstance(a, Evict):
                raise AssertionError(f"nobody is silent here: {a}")
        if op == "request" and args[0] == self.vip and before and (
                self.arb.holds(self.vip) or self.arb.order(self.now)[:1] == [self.vip]):
            # it runs, or it is the next to (a waiter let in by aging may come first)
            self.preemptions_checked += 1
            # preempted, or dropped for its quantum's end if the vip's share ended it just now
            dropped = {a.client for a in actions if isinstance(a, Drop) and a.reason in
                       (DropReason.PREEMPTED, DropReason.QUANTUM)}
            assert self.arb.holds(self.vip) or dropped >= set(before), \
                f"{self.vip} (priority 10) neither runs nor preempts {before}: {actions}"
        return actions

    def release(self, c):
        if not self.arb.holds(c):
            return
        self.held[c] += self.now - self.start.pop(c)
        self.call("release", c)
        if c in self.bursty or c == self.vip:
            self.at(self.rng.expovariate(1 / (5 * self.tq if c == self.vip else self.tq)),
                    "request", c)
        else:
            self.call("request", c)   # saturating: asks again at once

    def run(self, until):
        for c in self.shares:
            if c not in self.bursty:
                self.call("request", c)
        for c in self.bursty:
            self.at(self.rng.uniform(0, self.tq), "request", c)
        if self.vip is not None:
            self.at(self.rng.uniform(0, 5 * self.tq), "request", self.vip)
        while self.now < until:
            deadline = self.arb.next_deadline()
            nxt = self.events[0][0] if self.events else math.inf
            t = min(nxt, deadline if deadline is not None else math.inf, until)
            assert t < math.inf, "clients wait but nothing is timed"
            if self.arb.holders:
                self.busy += t - self.now
            elif self.arb.waiting:
                self.idle_waiting += t - self.now
            self.now = t
            if self.now >= until:
                break
            if deadline is not None and deadline <= nxt:
                self.call("tick")
                continue
            _, _, kind, c = heapq.heappop(self.events)
            if kind == "release":
                self.release(c)
            else:
                self.call(kind, c)
        for c, since in self.start.items():
            self.held[c] += self.now - since

    def expected(self, clients):
        """The part of the time each of `clients` should get among them: its share's, or that of
        its bounded quantum where a bound is met."""
        shares = {c: self.shares[c] for c in clients}
        if self.unbounded:
            total = sum(shares.values())
            return {c: s / total for c, s in shares.items()}
        mean = sum(self.shares.values()) / len(self.shares)
        quanta = {c: scaled_quantum(self.tq, s / mean) for c, s in shares.items()}
        total = sum(quanta.values())
        return {c: q / total for c, q in quanta.items()}


def _errors(sim, clients):
    total = sum(sim.held[c] for c in clients)
    want = sim.expected(clients)
    return {c: sim.held[c] / total - want[c] for c in clients}


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: f"{s[0]}-{(s[1] or 0) // GiB}GiB")
@pytest.mark.parametrize("seed", SEEDS)
def test_saturating_clients_get_time_in_proportion_to_their_shares(scene, seed):
    rng = random.Random(seed * 7919 + len(scene[0]))
    n = rng.randint(2, 5)
    shares = dict(zip([f"s{i}" for i in range(n)], _shares(rng, n)))
    sim = Sim(seed, *scene, shares)
    mean_quantum = sim.tq
    sim.run(ROUNDS * n * mean_quantum)
    errors = _errors(sim, list(shares))
    assert sim.idle_waiting == 0.0
    assert max(map(abs, errors.values())) <= TOLERANCE, (shares, sim.tq, errors)
    if scene[0] == "auto":   # memory fits or not: running holders never had unequal shares
        assert sim.busy == pytest.approx(sim.now)


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: f"{s[0]}-{(s[1] or 0) // GiB}GiB")
@pytest.mark.parametrize("seed", SEEDS)
def test_time_an_early_releaser_leaves_goes_to_the_others(scene, seed):
    rng = random.Random(seed * 104729 + len(scene[0]))
    n = rng.randint(2, 4)
    names = [f"s{i}" for i in range(n)] + [f"b{i}" for i in range(rng.randint(1, 2))]
    shares = dict(zip(names, _shares(rng, len(names))))
    bursty = [c for c in names if c.startswith("b")]
    sim = Sim(seed, *scene, shares, bursty=bursty)
    sim.run(ROUNDS * len(names) * sim.tq)
    saturating = [c for c in names if c not in bursty]
    # nobody waits while the GPU is free; with saturating clients it is never free at all
    assert sim.idle_waiting == 0.0
    assert sim.busy == pytest.approx(sim.now)
    # the early releasers use less than their share; the saturating ones split the rest by share
    total = sum(shares.values())
    for b in bursty:
        assert sim.held[b] / sim.now < shares[b] / total + TOLERANCE, (b, shares, sim.held)
    errors = _errors(sim, saturating) if len(saturating) > 1 else {saturating[0]: 0.0}
    assert max(map(abs, errors.values())) <= TOLERANCE, (shares, sim.tq, errors)


@pytest.mark.parametrize("scene", SCENES, ids=lambda s: f"{s[0]}-{(s[1] or 0) // GiB}GiB")
@pytest.mark.parametrize("seed", SEEDS)
def test_a_higher_priority_preempts_whatever_the_shares(scene, seed):
    rng = random.Random(seed * 15485863 + len(scene[0]))
    n = rng.randint(2, 4)
    shares = dict(zip([f"s{i}" for i in range(n)], _shares(rng, n)))
    sim = Sim(seed, *scene, shares, vip="vip")
    sim.shares["vip"] = sim.arb.share("vip")
    sim.held["vip"] = 0.0
    sim.run(ROUNDS * n * sim.tq)
    assert sim.preemptions_checked >= 10
    assert sim.idle_waiting == 0.0
