"""The policy against its frozen oracle: seeded random event sequences are played on the product's
Arbiter and on the reference's (policy_reference.py: the policy as it stood before its data structures
were reworked, read from git history),
and after every event both must have returned the same actions and must show the same snapshot,
the same records of holders and waiters, the same next deadline and the same state of every client.

The sequences mix every event the scheduler sends (request, release with and without a switch
report, disconnect, tick, set_priority, set_footprint, set_capacity, set_mode, set_tq), few or many
clients, varied priorities and footprints, silent clients that get evicted, busy clients that ask
again as soon as they release (long queues that keep moving, preempted clients resuming their
wait), and time that mostly advances (by nothing, a little, or several quanta) and now and then
steps back a little.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from xpushare.scheduler import policy as product
from xpushare.scheduler.policy import SwitchReport

import policy_reference

reference = policy_reference.load()

GiB = 2**30
CHUNKS = 24
SEQUENCES_PER_CHUNK = 100   # 2400 sequences in all
EVENTS = 120


def _plain(value):
    """Actions, snapshots and records as plain tuples, so that the two packages' classes compare."""
    if dataclasses.is_dataclass(value):
        return (type(value).__name__,) + tuple(_plain(getattr(value, f.name))
                                               for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "value") and not isinstance(value, (int, float)):  # enums (Mode)
        return value.value
    return value


def _state(arb, now, clients):
    return {
        "snapshot": _plain(arb.snapshot(now)),
        "describe": arb.describe(now),
        "holders": {c: _plain(h) for c, h in arb.holders.items()},
        "waiting": {c: _plain(w) for c, w in arb.waiting.items()},
        "order": arb.order(now),
        "queue": arb.queue,
        "live": arb.live_holders(),
        "next_deadline": arb.next_deadline(),
        "states": [arb.state_of(c) for c in clients],
        "tq": arb.tq, "switch_cost": arb.switch_cost,
    }


class Pair:
    """One event sequence played on both arbiters."""

    def __init__(self, seed: int):
        self.rng = rng = random.Random(seed)
        self.clients = [f"c{i}" for i in range(rng.choice([2, 4, 7, 12, 25, 60, 120]))]
        self.busy = rng.random() < 0.4   # released clients ask again at once
        self.weights = rng.choice([[34, 22, 7, 14, 8, 3, 6, 1.5, 1.5, 1, 1],
                                   [30, 20, 5, 10, 25, 2, 6, 0.5, 0.5, 0.5, 0.5]])
        self.prios = rng.choice([[0], [0, 1], [-2, 0, 3], list(range(-3, 6))])
        self.capacity = rng.choice([0, 8 * GiB, 16 * GiB, 40 * GiB])
        kw = dict(tq=rng.choice([None, None, 0.05, 0.5, 3.0]), capacity=self.capacity,
                  reserve=rng.choice([None, 0, GiB]),
                  client_overhead=rng.choice([0, 0, 768 * 2**20]))
        mode = rng.choice(["auto", "auto", "serial", "off"])
        self.new = product.Arbiter(product.Mode(mode), **kw)
        self.old = reference.Arbiter(reference.Mode(mode), **kw)
        self.now = rng.choice([0.0, 1000.0])
        self.silent: set = set()
        self.steps = 0
        if rng.random() < 0.25:
            self.crowd()

    def crowd(self):
        """Everyone asks at the start, with footprints that do not all fit: a long queue."""
        rng = self.rng
        self.busy = True
        if self.capacity == 0:
            self.capacity = 16 * GiB
            self.call("set_capacity", self.capacity)
        for c in self.clients:
            self.call("set_footprint", c, rng.randrange(0, self.capacity // 2, GiB // 4))
            if rng.random() < 0.5:
                self.call("set_priority", c, rng.choice(self.prios))
        for c in self.clients:
            self.now += rng.choice([0.0, 0.001, 0.1])
            self.call("request", c)

    def call(self, op, *args, **kw):
        self.steps += 1
        got = getattr(self.new, op)(*args, self.now, **kw)
        want = getattr(self.old, op)(*args, self.now, **_reference_kw(kw))
        where = f"event {self.steps} at {self.now}: {op}{args}"
        assert _plain(got) == _plain(want), f"{where}: {got} != {want}"
        assert _state(self.new, self.now, self.clients) == \
            _state(self.old, self.now, self.clients), f"{where}: the states differ"
        for a in got:
            if type(a).__name__ == "Evict":  # the server closes the evicted client's connection
                self.silent.discard(a.client)
                self.call("disconnect", a.client)
        return got

    def advance(self):
        rng = self.rng
        step = rng.choice([0.0, 0.0, 0.001, 0.02, 0.3, 1.0, 4.0, 13.0])
        if rng.random() < 0.02:
            step = -rng.choice([0.001, 0.5])
        self.now += step

    def event(self):
        rng, arb = self.rng, self.new
        self.advance()
        deadline = arb.next_deadline()
        if deadline is not None and deadline <= self.now and rng.random() < 0.8:
            self.call("tick")
            return
        c = rng.choice(self.clients)
        draining = [h for h, s in arb.holders.items() if s.drop_sent is not None
                    and h not in self.silent]
        kind = rng.choices(
            ["request", "release_dropped", "release_idle", "footprint", "priority", "disconnect",
             "tick", "mode", "tq", "capacity", "go_silent"],
            weights=self.weights)[0]
        if kind == "request":
            self.call("request", c)
        elif kind == "release_dropped" and draining:
            report = rng.choice([None, SwitchReport(drain=0.01, evict=rng.choice([0.0, 0.1]),
                                                    prefetch=rng.choice([0.0, 0.05, 0.4]))])
            self.release(rng.choice(draining), report=report)
        elif kind == "release_idle":
            self.release(rng.choice(list(arb.holders) or [c]))
        elif kind == "footprint":
            top = max(self.capacity, 8 * GiB)
            self.call("set_footprint", c, rng.randrange(0, top // 2 + 1, GiB // 4))
        elif kind == "priority":
            self.call("set_priority", c, rng.choice(self.prios))
        elif kind == "disconnect":
            self.silent.discard(c)
            self.call("disconnect", c)
        elif kind == "tick":
            self.call("tick")
        elif kind == "mode":
            self.call("set_mode", rng.choice(list(product.Mode)))
        elif kind == "tq":
            self.call("set_tq", rng.choice([None, 0.05, 0.2, 2.0]))
        elif kind == "capacity":
            self.capacity = rng.choice([0, 8 * GiB, 16 * GiB, 40 * GiB])
            self.call("set_capacity", self.capacity)
        elif kind == "go_silent":
            self.silent.add(c)

    def release(self, client, report=None):
        self.call("release", client, report=report)
        if self.busy and self.rng.random() < 0.8:
            self.call("request", client)


def _reference_kw(kw):
    """A SwitchReport for the reference is its own class."""
    if kw.get("report") is not None:
        return {**kw, "report": reference.SwitchReport(**dataclasses.asdict(kw["report"]))}
    return kw



@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_policy_decides_exactly_as_its_frozen_reference(chunk):
    for i in range(SEQUENCES_PER_CHUNK):
        pair = Pair(chunk * SEQUENCES_PER_CHUNK + i)
        for _ in range(EVENTS):
            pair.event()
