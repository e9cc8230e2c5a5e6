"""Residency keeps the policy's cost per event (test_policy_cost.py): with 1000 idle clients whose
memory stays on the GPU, an event costs about what it costs with 10 (a log factor allowed), and a
request that needs one of them reclaimed chooses it in O(log n). The measure is test_policy_cost's:
lines of the policy package executed (sys.settrace), the event followed by next_deadline(), as the
scheduler calls it."""

from __future__ import annotations

import pytest

from xpushare.scheduler.policy import Arbiter, Grant, Mode, Reclaim

from test_policy_cost import FACTOR, LARGE, REPEAT, SMALL, _work

GiB = 2**30


class Parked:
    """n idle clients that answer EVICT keep 8 GiB on a 16 GiB GPU between them (priorities 0 to
    2, released one after the other), and a holder runs with 4 GiB (in auto mode: in serial mode
    a waiter's room is looked at once nobody runs)."""

    def __init__(self, mode: str, n: int):
        self.arb = arb = Arbiter(Mode(mode), 1.0, capacity=16 * GiB, reserve=0, client_overhead=0)
        self.now, self.unit, self.fresh = 0.0, 8 * GiB // n, 0
        self.parked = [f"p{i}" for i in range(n)]
        for i, c in enumerate(self.parked):
            arb.set_swappable(c, True, self.now)
            arb.set_footprint(c, self.unit, self.now)
            arb.set_priority(c, i % 3, self.now)
            assert [a.client for a in arb.request(c, self.now)] == [c]
            self.now += 0.001
            arb.release(c, self.now)
        arb.set_swappable("h", True, self.now)
        arb.set_footprint("h", 4 * GiB, self.now)
        self.running = mode == "auto"
        if self.running:
            assert arb.request("h", self.now) == [Grant("h", 1.0)]

    def event(self, op, *args) -> tuple[int, list]:
        out: list = []
        work = _work(lambda: (out.extend(getattr(self.arb, op)(*args, self.now)),
                              self.arb.next_deadline()))
        return work, out

    def waiter(self) -> str:
        """A client that needs what is left and one idle client's bytes more."""
        self.fresh += 1
        w = f"w{self.fresh}"
        self.arb.set_swappable(w, True, self.now)
        room = 4 * GiB if self.running else 8 * GiB
        self.arb.set_footprint(w, room + self.unit, self.now)
        return w

    def done(self, w: str, victim: str) -> None:
        """w ran: it goes, and the victim's memory is back on the GPU, as it was: it takes a turn
        (a report cannot put it back: residency is granted by a release)."""
        assert self.arb.holds(w)
        self.arb.disconnect(w, self.now)
        assert [a.client for a in self.arb.request(victim, self.now)] == [victim]
        self.arb.release(victim, self.now)

    def measure(self, kind: str, i: int) -> int:
        arb = self.arb
        self.now += 0.01
        c = self.parked[(len(self.parked) * (i + 1)) // (REPEAT + 2)]
        if kind == "request":   # one idle client is chosen and asked
            w = self.waiter()
            work, actions = self.event("request", w)
            (victim,) = [a.client for a in actions if isinstance(a, Reclaim)]
            assert arb.residency(victim, 0, self.now) == [Grant(w, 1.0)]
            self.done(w, victim)
            return work
        if kind == "answer":    # the answer lets the waiter in
            w = self.waiter()
            (reclaim,) = arb.request(w, self.now)
            work, actions = self.event("residency", reclaim.client, 0)
            assert actions == [Grant(w, 1.0)]
            self.done(w, reclaim.client)
            return work
        if kind == "release":   # the holder leaves its memory on the GPU, and comes back
            if not self.running:
                assert arb.request("h", self.now) == [Grant("h", 1.0)]
            work, _ = self.event("release", "h")
            if self.running:
                assert arb.request("h", self.now) == [Grant("h", 1.0)]
            return work
        if kind == "tick":
            self.now = max(self.now, arb.next_deadline() or self.now)
            return self.event("tick")[0]
        if kind == "set_priority":
            return self.event("set_priority", c, (arb.priority(c) + 1) % 3)[0]
        if kind == "set_footprint":
            return self.event("set_footprint", c, self.unit // 2)[0]
        if kind == "disconnect":
            return self.event("disconnect", c)[0]
        raise AssertionError(kind)


KINDS = ["request", "answer", "release", "tick", "set_priority", "set_footprint", "disconnect"]


def _cost(mode: str, kind: str, n: int) -> float:
    scene = Parked(mode, n)
    return sum(scene.measure(kind, i) for i in range(REPEAT)) / REPEAT


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["auto", "serial"])
def test_with_idle_clients_on_the_gpu_an_event_costs_about_the_same_at_1000_as_at_10(mode, kind):
    small, large = _cost(mode, kind, SMALL), _cost(mode, kind, LARGE)
    assert large <= FACTOR * max(small, 1.0), \
        f"{mode} {kind}: {large:.0f} lines at {LARGE} idle clients, {small:.0f} at {SMALL}"
