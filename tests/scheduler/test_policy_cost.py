"""The policy's cost per event does not grow with the queue: operation counts, not time.

The work of one event is the number of lines of the policy package that Python executes for it
(sys.settrace, counting only frames of the package's files), the event followed by next_deadline()
as the scheduler calls it after every event. For each mode and each kind of event, the work at 1000
waiting clients (in mode off: 1000 holders, as nobody waits there) must stay within a small factor
of the work at 10 (a log factor allowed); so too in auto mode with the capacity unknown, where all
1000 run at once and their quanta have run out. The policy keeps its waiters in structures it does not
rescan, so an event costs O(log n), or O(k) in the clients it changes, not O(n) or O(n^2).

POLICY_COST_AGAINST=reference runs the same checks against the policy as it stood before
(policy_reference.py, read from git history); it fails them: its auto mode rescanned the blocked
waiters once per waiter.

The same checks run with compute shares set (", shares": shares 1 to 3, so that in auto mode the
clients take turns by share as well as by memory), and for set_share itself.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

import policy_reference
from xpushare.scheduler import policy as product

POLICY = policy_reference.load() if os.environ.get("POLICY_COST_AGAINST") == "reference" else product
GiB = 2**30
SMALL, LARGE = 10, 1000
REPEAT = 6                    # events of each kind measured, averaged
FACTOR = 2.0 * math.log2(LARGE) / math.log2(SMALL)   # a log factor, and 2 for the constant


def _work(fn) -> int:
    """Lines of the policy package executed by fn()."""
    root = str(Path(POLICY.__file__).parent)
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def glob(frame, event, arg):
        if frame.f_code.co_filename.startswith(root):
            return local
        return None

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


class Scene:
    """n clients asked for the GPU (footprints of 6 to 10 GiB in 16: at most two run together in
    auto mode), priorities 0 to 2, arrivals spread over several quanta so that aging differs.
    With capacity 0 (unknown) in auto mode all run, and are left to run past their quanta."""

    def __init__(self, mode: str, n: int, capacity: int = 16 * GiB, shares: bool = False):
        self.arb = arb = POLICY.Arbiter(POLICY.Mode(mode), 1.0, capacity=capacity, reserve=0,
                                        client_overhead=0)
        self.now, self.fresh = 0.0, 0
        for i in range(n + 1):
            arb.set_footprint(f"c{i}", (6 + i % 5) * GiB, self.now)
            arb.set_priority(f"c{i}", i % 3, self.now)
            if shares:
                arb.set_share(f"c{i}", 1 + i % 7 % 3, self.now)
        for i in range(n + 1):
            self.now += 4.0 / n
            arb.request(f"c{i}", self.now)
        self.now += 3.0
        arb.tick(self.now)
        # Every client has a prefetch average, as n clients' reports would leave them (the
        # product's median of them, policy/median.py; the reference kept one average).
        if hasattr(arb, "_costs"):
            for i in range(n + 1):
                arb._costs.prefetches.set(f"c{i}", 0.01 * (i % 97))
            arb._costs.changed()

    def event(self, op, *args, **kw):
        return _work(lambda: (getattr(self.arb, op)(*args, self.now, **kw),
                              self.arb.next_deadline()))

    def running(self):
        return next(c for c, h in self.arb.holders.items() if h.drop_sent is None)

    def waiter(self, i):
        """A waiter some way into the queue (a holder in mode off)."""
        pool = list(self.arb.waiting) or list(self.arb.holders)
        return pool[(len(pool) * (i + 1)) // (REPEAT + 2)]

    def settle(self):
        """Dropped holders release and ask again, so the queue keeps its length."""
        for _ in range(10):
            draining = [c for c, h in self.arb.holders.items() if h.drop_sent is not None]
            if not draining:
                return
            for c in draining:
                self.arb.release(c, self.now)
                self.arb.request(c, self.now)

    def measure(self, kind: str, i: int) -> int:
        self.now += 0.01
        self.settle()
        arb = self.arb
        if kind == "request":
            self.fresh += 1
            return self.event("request", f"new{self.fresh}")
        if kind in ("release", "release_report"):
            c = self.running()
            report = None
            if kind == "release_report":  # a grant with PREFETCH, whose prefetch counts
                report = POLICY.SwitchReport(prefetch=0.01 * (i + 1))
                if hasattr(arb, "_costs"):
                    arb._costs.prefetching.add(c)
            work = self.event("release", c, report=report)
            arb.request(c, self.now)
            return work
        if kind == "tick":
            self.now = max(self.now, arb.next_deadline() or self.now)
            work = self.event("tick")
            self.settle()
            return work
        if kind == "disconnect":
            c = self.waiter(i)
            work = self.event("disconnect", c)
            arb.set_footprint(c, 6 * GiB, self.now)
            arb.request(c, self.now)
            return work
        if kind == "set_priority":
            c = self.waiter(i)
            return self.event("set_priority", c, (arb.priority(c) + 1) % 3)
        if kind == "set_footprint":
            c = self.waiter(i) if i % 2 else self.running()
            return self.event("set_footprint", c, (6 + i % 3) * GiB)
        if kind == "set_share":
            c = self.waiter(i) if i % 2 else self.running()
            return self.event("set_share", c, 1 + (i + 1) % 3)
        raise AssertionError(kind)


KINDS = ["request", "release", "release_report", "tick", "disconnect", "set_priority",
         "set_footprint"]


def _cost(mode: str, kind: str, n: int) -> float:
    capacity = 0 if "capacity unknown" in mode else 16 * GiB
    scene = Scene(mode.split(",")[0], n, capacity, shares="shares" in mode)
    return sum(scene.measure(kind, i) for i in range(REPEAT)) / REPEAT


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["auto", "serial", "off", "auto, capacity unknown"])
def test_an_event_costs_about_the_same_at_1000_clients_as_at_10(mode, kind):
    small, large = _cost(mode, kind, SMALL), _cost(mode, kind, LARGE)
    assert large <= FACTOR * max(small, 1.0), \
        f"{mode} {kind}: {large:.0f} lines at {LARGE} clients, {small:.0f} at {SMALL}"


@pytest.mark.skipif(not hasattr(POLICY.Arbiter, "set_share"), reason="no compute shares")
@pytest.mark.parametrize("kind", KINDS + ["set_share"])
@pytest.mark.parametrize("mode", ["auto, shares", "serial, shares", "off, shares",
                                  "auto, capacity unknown, shares"])
def test_with_shares_an_event_costs_about_the_same_at_1000_clients_as_at_10(mode, kind):
    small, large = _cost(mode, kind, SMALL), _cost(mode, kind, LARGE)
    assert large <= FACTOR * max(small, 1.0), \
        f"{mode} {kind}: {large:.0f} lines at {LARGE} clients, {small:.0f} at {SMALL}"


def test_the_measure_sees_the_work():
    """So that the test above is not vacuous: listing the queue in serving order is O(n log n)
    lines at least, and the measure shows it."""
    small, large = Scene("auto", SMALL), Scene("auto", LARGE)
    assert _work(lambda: large.arb.order(large.now)) > 20 * _work(lambda: small.arb.order(small.now))
