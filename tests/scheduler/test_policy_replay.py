"""The replay helper the policy tests share, and tests that its checks catch broken decisions.

Replay feeds an Arbiter one call at a time with injected time and, after each call, checks what must
hold whatever the script: nobody granted twice or granted while holding, nobody both holding and
waiting, drops only to running holders, PREFETCH exactly after a drop with EVICT (or an answer to a
reclaim that moved memory to host), Evict only to a holder draining or a client being reclaimed, the
quantum of the mode (scaled by the client's compute share over the mean share of the holders and waiters), no
deadline left in the past, at most one running holder in serial mode, and in auto mode the running
holders' footprints within the budget whenever more than one runs, and never two running holders
of unequal shares.
"""

from fractions import Fraction

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Evict, Grant, Mode, Overdue, scaled_quantum

GiB = 2**30


def expected_quantum(arb, client):
    """The quantum a grant to `client` must carry, worked out from the holders and waiters after
    the call (a grant moves a client from one to the other; nobody leaves a step after a grant)."""
    if arb.mode == Mode.OFF:
        return 0.0
    shares = [arb.share(c) for c in {*arb.holders, *arb.queue}]
    if len(set(shares)) <= 1:
        return arb.tq
    mean = sum(map(Fraction, shares)) / len(shares)
    return scaled_quantum(arb.tq, float(Fraction(arb.share(client)) / mean))


class Replay:
    """Feeds an arbiter a script and checks invariants after every call."""

    def __init__(self, arb):
        self.arb = arb
        self.actions = []      # (time, action) of everything returned
        self.last_evict = {}   # client -> the EVICT flag of its last Drop

    @property
    def granted(self):
        return [(t, a.client) for t, a in self.actions if isinstance(a, Grant)]

    @property
    def evicted(self):
        return [(t, a.client) for t, a in self.actions if isinstance(a, Evict)]

    def __call__(self, now, op, *args, **kw):
        arb = self.arb
        holding = set(arb.holders)
        draining = {c for c, h in arb.holders.items() if h.drop_sent is not None}
        waiting = set(arb.queue)
        reclaiming = set(getattr(arb, "_res").reclaiming) if hasattr(arb, "_res") else set()
        if op == "request":
            waiting.add(args[0])
        # A report from a client not holding, that answers EVICT, of less than its footprint: its
        # memory went to host.
        moved = (op == "residency" and args[0] not in holding and args[0] in arb._res.swappable
                 and args[1] < arb._footprints.get(args[0], 0))
        actions = getattr(arb, op)(*args, now, **kw)
        if moved:
            self.last_evict[args[0]] = True   # its memory went to host: PREFETCH at its grant
        if op == "disconnect":
            self.last_evict.pop(args[0], None)
        granted, dropped = [], []
        for a in actions:
            self.actions.append((now, a))
            if isinstance(a, Grant):
                assert a.client not in holding and a.client not in granted, f"double grant {a}"
                assert a.client in waiting, f"{a.client} granted without asking"
                assert a.quantum == expected_quantum(arb, a.client), a
                assert a.prefetch == self.last_evict.pop(a.client, False), \
                    f"{a}: PREFETCH must follow exactly a drop with EVICT"
                granted.append(a.client)
            elif isinstance(a, Drop):
                assert a.client in holding - draining and a.client not in dropped, \
                    f"{a}: only a running holder is dropped, once"
                self.last_evict[a.client] = a.evict
                dropped.append(a.client)
            elif isinstance(a, Overdue):
                assert a.client in draining, f"{a}: only a draining holder is overdue"
            elif isinstance(a, Evict):
                assert a.client in draining | reclaiming, \
                    f"{a}: only a draining holder or a client being reclaimed is evicted"
            if isinstance(a, Evict):
                assert arb.state_of(a.client) == "idle", "an evicted client keeps nothing"
        for c in dropped:
            assert arb.holders[c].drop_sent == now, "a dropped holder drains until it releases"
        self.check(now)
        return actions

    def check(self, now):
        arb = self.arb
        deadline = arb.next_deadline()
        assert deadline is None or deadline > now, "a deadline in the past would spin the timer"
        assert not set(arb.holders) & set(arb.queue), "a client both holds and waits"
        running = arb.live_holders()
        if arb.mode == Mode.SERIAL:
            assert len(running) <= 1, f"serial mode with running holders {running}"
        if arb.mode == Mode.AUTO and arb.budget is not None and len(running) > 1:
            assert arb.footprints(running) <= arb.budget, \
                f"running holders {running} take {arb.footprints(running)} > {arb.budget}"
        if arb.mode == Mode.AUTO:
            shares = {arb.share(c) for c in running}
            assert len(shares) <= 1, f"running holders {running} of unequal shares {shares}"


def play(r, script):
    """Rows (time, method, *args, expected actions): each call must return exactly its expected."""
    for row in script:
        now, op, *args, expected = row
        actual = r(now, op, *args)
        assert actual == expected, f"at {now} {op}{tuple(args)}: {actual} != {expected}"


def auto(capacity=10 * GiB, tq=10.0, **kw):
    """An auto-mode arbiter with round numbers: no reserve and no context overhead unless given."""
    kw.setdefault("reserve", 0)
    kw.setdefault("client_overhead", 0)
    return Arbiter(Mode.AUTO, tq, capacity=capacity, **kw)


def with_footprints(r, now, **sizes_gib):
    for client, size in sizes_gib.items():
        r(now, "set_footprint", client, int(size * GiB))


# -- the checks themselves -------------------------------------------------------------------------
class Scripted:
    """A stand-in arbiter that returns the actions it is given, to show Replay rejects them."""

    def __init__(self, mode, actions, holders=(), draining=()):
        real = Arbiter(mode, 10.0)
        for c in holders:
            real.request(c, 0)
        for c in draining:
            real.holders[c].drop_sent = 0
        self.real, self.actions = real, actions

    def __getattr__(self, name):
        return getattr(self.real, name)

    def tick(self, now):
        return self.actions


@pytest.mark.parametrize("actions, holders, draining, message", [
    ([Grant("A", 10.0)], ["A"], [], "double grant"),
    ([Grant("B", 10.0)], ["A"], [], "without asking"),
    ([Drop("B", DropReason.QUANTUM)], ["A"], [], "only a running holder"),
    ([Drop("A", DropReason.QUANTUM)], ["A"], ["A"], "only a running holder"),
    ([Evict("A", 1.0)], ["A"], [], "only a draining holder"),
])
def test_replay_rejects_impossible_actions(actions, holders, draining, message):
    r = Replay(Scripted(Mode.OFF, actions, holders, draining))
    with pytest.raises(AssertionError, match=message):
        r(1, "tick")


def test_replay_rejects_a_grant_without_prefetch_after_an_evicting_drop():
    arb = auto()
    r = Replay(arb)
    r(0, "request", "A")
    r.last_evict["A"] = True  # as if A had been dropped with EVICT
    arb.release("A", 0.5)
    with pytest.raises(AssertionError, match="PREFETCH"):
        r(1, "request", "A")


def test_replay_rejects_running_holders_that_do_not_fit():
    arb = auto()
    r = Replay(arb)
    r(0, "request", "A")
    r(0, "request", "B")
    arb._footprints["A"] = 8 * GiB  # behind the arbiter's back: no growth check ran
    arb._footprints["B"] = 8 * GiB
    with pytest.raises(AssertionError, match="take"):
        r.check(1)


def test_play_reports_the_first_difference():
    r = Replay(Arbiter(Mode.SERIAL, 10.0))
    with pytest.raises(AssertionError, match="at 1 request"):
        play(r, [(0, "request", "A", [Grant("A", 10.0)]),
                 (1, "request", "B", [Grant("B", 10.0)])])
