"""The policy against its frozen oracle: seeded random event sequences are played on the product's
Arbiter and on the reference's (policy_reference.py: the policy as it stood before its data structures
were reworked, read from git history),
and after every event both must have returned the same actions and must show the same snapshot,
the same records of holders and waiters, the same next deadline and the same state of every client.

Two rules changed since that commit, on purpose: how clients' prefetch reports and handoff times
enter the dynamic quantum (a prefetch report counts only for a grant with PREFETCH, cut to a
plausible time, into the client's own average; a handoff into the client's own average too; the
quantum takes the lower median of the handoff averages, and of the prefetch averages once two
clients have one). The oracle is
the reference with those rules added the plain way (Reference below: dicts of averages and
statistics.median_low, recomputed at each change), so the sequences still cover prefetch reports,
huge ones included, and late releases; everything else is the reference as it was.

The sequences mix every event the scheduler sends (request, release with and without a switch
report, disconnect, tick, set_priority, set_footprint, set_capacity, set_mode, set_tq), few or many
clients, varied priorities and footprints, silent clients that get evicted, busy clients that ask
again as soon as they release (long queues that keep moving, preempted clients resuming their
wait), and time that mostly advances (by nothing, a little, or several quanta) and now and then
steps back a little.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from xpushare.scheduler import policy as product
from xpushare.scheduler.policy import SwitchReport

import policy_reference

reference = policy_reference.load()


class Reference(reference.Arbiter):
    """The reference policy with the prefetch rule of the product (model.py, arbiter.release),
    written without its data structures."""

    _handoff_median = None

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._averages: dict = {}          # client -> its average prefetch
        self._handoffs: dict = {}          # client -> its average handoff
        self._with_prefetch: set = set()   # holders granted with PREFETCH

    # The reference keeps one handoff average (it assigns self._handoff in release); the rule of the
    # product replaces it with the lower median of the clients' own averages.
    @property
    def _handoff(self):
        return self._handoff_median

    @_handoff.setter
    def _handoff(self, value):
        pass

    def _note_handoff(self, client, now):
        h = self.holders.get(client)
        if h is None or h.drop_sent is None or h.drop_reason not in product.SWITCH_REASONS:
            return
        sample = max(0.0, now - h.drop_sent)
        old = self._handoffs.get(client)
        self._handoffs[client] = sample if old is None else \
            product.EWMA_ALPHA * sample + (1 - product.EWMA_ALPHA) * old
        self._handoff_median = _median_low(self._handoffs, 1)

    def _grant(self, client, now, quantum):
        grant = super()._grant(client, now, quantum)
        (self._with_prefetch.add if grant.prefetch else self._with_prefetch.discard)(client)
        return grant

    def release(self, client, now, report=None):
        self._note_handoff(client, now)
        if client in self.holders and client in self._with_prefetch:
            self._with_prefetch.discard(client)
            seconds = report.prefetch if report is not None else 0.0
            if math.isfinite(seconds) and seconds > 0:
                sample = min(seconds, product.SWITCH_REPORT_MAX,
                             self._footprints.get(client, 0) / product.PREFETCH_FLOOR_RATE)
                if sample > 0:
                    old = self._averages.get(client)
                    self._averages[client] = sample if old is None else \
                        product.EWMA_ALPHA * sample + (1 - product.EWMA_ALPHA) * old
                    self._median()
        return super().release(client, now)  # the reference's own prefetch average stays unused

    def disconnect(self, client, now):
        self._with_prefetch.discard(client)
        if self._averages.pop(client, None) is not None:
            self._median()
        if self._handoffs.pop(client, None) is not None:
            self._handoff_median = _median_low(self._handoffs, 1)
        return super().disconnect(client, now)

    def _median(self):
        self._prefetch = _median_low(self._averages)


def _median_low(averages: dict, enough: int = product.SWITCH_REPORTERS):
    return statistics.median_low(averages.values()) if len(averages) >= enough else None

GiB = 2**30
CHUNKS = 16
SEQUENCES_PER_CHUNK = 50    # 800 sequences in all
EVENTS = 120
# The actions are compared after every event, the whole state (snapshot, records, order, every
# client's state: two thirds of the test's time) after every STATE_EVERY-th and at the end. What
# goes unseen is only a difference that changes no action and heals within STATE_EVERY events; a
# lasting one is found at most STATE_EVERY - 1 events late (the message names the event).
STATE_EVERY = 4
SWITCHY_CHUNKS = 4          # 200 sequences more, of prefetch reports
PREFETCHES = [0.0, 0.05, 0.4, 3.0, 4294.967295]  # seconds; the last is LOCK_RELEASED's largest


_SCALARS = (int, float, str, bool, type(None))
_COMPARED: dict = {}  # dataclass type -> the names of its fields that take part in equality


def _plain(value):
    """Actions, snapshots and records as plain tuples, so that the two packages' classes compare.
    Fields left out of equality (Drop.gang, set by the jobs layer above the arbiter) are left out
    here too. (It runs after every event on both sides: the field lists are looked up once.)"""
    kind = type(value)
    if kind in _SCALARS:
        return value
    names = _COMPARED.get(kind)
    if names is None and dataclasses.is_dataclass(value):
        names = _COMPARED[kind] = tuple(f.name for f in dataclasses.fields(value) if f.compare)
    if names is not None:
        return (kind.__name__,) + tuple(_plain(getattr(value, n)) for n in names)
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

    def __init__(self, seed: int, switchy: bool = False):
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
        if switchy:  # few clients that switch often under the dynamic quantum, reporting prefetches
            self.clients = self.clients[:rng.choice([2, 3, 5, 7])]
            self.weights = [10, 40, 3, 1, 3, 0.5, 25, 0.3, 0.3, 0, 0.2]
            self.capacity = kw["capacity"] = 16 * GiB
            kw["tq"], mode = None, rng.choice(["auto", "serial"])
        self.new = product.Arbiter(product.Mode(mode), **kw)
        self.old = Reference(reference.Mode(mode), **kw)
        self.now = rng.choice([0.0, 1000.0])
        self.silent: set = set()
        self.steps = 0
        if switchy or rng.random() < 0.25:
            self.crowd(heavy=switchy)

    def crowd(self, heavy=False):
        """Everyone asks at the start, with footprints that do not all fit: a long queue. Heavy: no
        two fit together, so that every switch evicts and grants come with PREFETCH."""
        rng = self.rng
        self.busy = True
        if self.capacity == 0:
            self.capacity = 16 * GiB
            self.call("set_capacity", self.capacity)
        low, high = (self.capacity // 2 + GiB, self.capacity) if heavy else (0, self.capacity // 2)
        for c in self.clients:
            self.call("set_footprint", c, rng.randrange(low, high, GiB // 4))
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
        if self.steps % STATE_EVERY == 0:
            self.check_state(where)
        for a in got:
            if type(a).__name__ == "Evict":  # the server closes the evicted client's connection
                self.silent.discard(a.client)
                self.call("disconnect", a.client)
        return got

    def check_state(self, where="at the end"):
        assert _state(self.new, self.now, self.clients) == \
            _state(self.old, self.now, self.clients), f"{where}: the states differ"

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
            report = None if rng.random() < 0.2 else SwitchReport(
                drain=0.01, evict=rng.choice([0.0, 0.1]), prefetch=rng.choice(PREFETCHES))
            self.release(rng.choice(draining), report=report)
        elif kind == "release_idle":
            self.release(rng.choice(list(arb.holders) or [c]),
                         report=rng.choice([None, SwitchReport(prefetch=rng.choice(PREFETCHES))]))
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
    """The reference takes the product's SwitchReport (Reference.release reads its prefetch)."""
    return kw



@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_policy_decides_exactly_as_its_frozen_reference(chunk):
    for i in range(SEQUENCES_PER_CHUNK):
        pair = Pair(chunk * SEQUENCES_PER_CHUNK + i)
        for _ in range(EVENTS):
            pair.event()
        pair.check_state()


@pytest.mark.parametrize("chunk", range(SWITCHY_CHUNKS))
def test_prefetch_reports_move_the_quantum_exactly_as_the_plain_rule_says(chunk):
    """Sequences of few clients that switch often under the dynamic quantum, each switch evicting
    and each grant after it carrying PREFETCH, so that prefetch reports (huge ones too) and
    disconnects keep changing the clients' averages and their median."""
    for i in range(SEQUENCES_PER_CHUNK):
        pair = Pair(10**6 + chunk * SEQUENCES_PER_CHUNK + i, switchy=True)
        for _ in range(EVENTS):
            pair.event()
        pair.check_state()
