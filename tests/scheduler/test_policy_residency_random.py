"""Seeded random runs with clients that answer EVICT (policy/residency.py), on the World of
test_policy_invariants: most clients are swappable; reclaimed ones answer at once, refuse (their
host swap ran out), move only part, or stay silent; holders dropped with EVICT report what stays
before releasing; idle ones now and then report on their own. After every call, besides Replay's
checks:
- resident_total() is the sum of resident_bytes() over the clients, a holder's is its footprint,
  an idle or waiting client's at most its footprint, and 0 for a client that does not answer EVICT;
- a Reclaim goes only to an idle client that answers EVICT, once until it answers;
- a grant never takes the resident total past the budget, unless the client granted runs alone and
  every other resident byte is one the policy may not ask for (a waiter's, or a client's that
  refused or could not move since its last grant);
and once requests stop, everyone is served (reclaims answered or evicted, nobody stuck).
"""

import pytest

from xpushare.scheduler.policy import Evict, Grant, Mode, Reclaim

from test_policy_invariants import CLIENTS, World

STEPS = 800


class SwapWorld(World):
    def __init__(self, seed: int, mode: Mode):
        super().__init__(seed, mode)
        rng = self.rng
        self.kind = {c: rng.choice(["prompt", "prompt", "prompt", "refuse", "partial"])
                     for c in CLIENTS}
        self.swappable = {c for c in CLIENTS if rng.random() < 0.8}
        self.pinned: set = set()      # left bytes on the GPU when asked, since its last grant
        self.reclaims = self.answers = self.lone = self.evicted = 0
        for c in sorted(self.swappable):
            self.r(self.now, "set_swappable", c, True)

    def rejoin(self, client):
        """A disconnected client comes back as a new connection, with the same HELLO."""
        self.pinned.discard(client)
        if client in self.swappable:
            self.r(self.now, "set_swappable", client, True)

    def call(self, op, *args, **kw):
        arb = self.arb
        asked_before = {c for c in CLIENTS if arb.is_reclaiming(c)}
        pin = False
        if op == "residency":
            c, nbytes = args[0], args[1]
            h = arb.holders.get(c)
            if h is None:
                pin = kw.get("refused", False) or (c in asked_before and nbytes > 0)
            else:
                pin = kw.get("refused", False) and h.drop_sent is not None
        actions = self.r(self.now, op, *args, **kw)
        if pin:
            self.pinned.add(args[0])
        self.check(actions, asked_before)
        for a in actions:
            if isinstance(a, Evict):  # the server closes the evicted client's connection
                self.evicted += a.client in asked_before
                self.r(self.now, "disconnect", a.client)
                self.silent.discard(a.client)
                self.rejoin(a.client)
                self.check([], set())
        if op == "disconnect":
            self.rejoin(args[0])
        return actions

    def check(self, actions, asked_before):
        arb = self.arb
        total = 0
        for c in CLIENTS:
            r, fp = arb.resident_bytes(c), arb._footprints.get(c, 0)
            if c in arb.holders:
                assert r == fp, (c, r, fp)
            else:
                assert 0 <= r <= fp, (c, r, fp)
                if c not in self.swappable:
                    assert r == 0, f"{c} does not answer EVICT, yet counts {r} idle"
            total += r
        assert arb.resident_total() == total
        for a in actions:
            if isinstance(a, Reclaim):
                self.reclaims += 1
                # idle (it may have released in this very call)
                assert arb.state_of(a.client) == "idle" and a.client in self.swappable, a
                assert a.client not in asked_before, f"{a}: asked twice"
                assert a.client not in self.pinned, f"{a}: it could not move, and was not granted"
                assert arb.is_reclaiming(a.client) or isinstance(actions[-1], Evict)
            elif isinstance(a, Grant):
                self.pinned.discard(a.client)
        granted = [a.client for a in actions if isinstance(a, Grant)]
        budget = arb.budget
        if granted and arb.mode != Mode.OFF and budget is not None and \
                arb.resident_total() > budget:
            assert list(arb.holders) == granted, \
                f"{granted} granted past the budget beside holders {list(arb.holders)}"
            (alone,) = granted
            others = arb.resident_total() - arb.resident_bytes(alone)
            may_not_ask = sum(arb.resident_bytes(c) for c in CLIENTS
                              if c != alone and (c in arb.waiting or c in self.pinned))
            assert others == may_not_ask, (
                f"{alone} runs alone past the budget while {others - may_not_ask} bytes of idle "
                "clients could have been reclaimed")
            self.lone += 1

    def answer(self, client):
        """A reclaimed client answers as its kind does."""
        fp = self.arb._footprints.get(client, 0)
        kind = self.kind[client]
        self.answers += 1
        if kind == "refuse":
            self.call("residency", client, fp // 2, refused=True)
        elif kind == "partial":
            self.call("residency", client, fp // 3)
        else:
            self.call("residency", client, 0)

    def random_event(self):
        rng, arb = self.rng, self.arb
        asked = [c for c in CLIENTS if arb.is_reclaiming(c) and c not in self.silent]
        if asked and rng.random() < 0.5:
            self.answer(rng.choice(asked))
            return
        roll = rng.random()
        if roll < 0.07:
            evicting = [c for c, h in arb.holders.items() if h.drop_sent is not None
                        and self.r.last_evict.get(c) and c not in self.silent]
            if evicting:   # RESIDENCY right before LOCK_RELEASED
                c = rng.choice(evicting)
                fp = arb._footprints.get(c, 0)
                self.call("residency", c, rng.choice([0, 0, fp // 4]),
                          refused=self.kind[c] == "refuse")
                self.call("release", c)
                return
        elif roll < 0.09:
            c = rng.choice(CLIENTS)   # a report of its own (a swap-out after LOCK_RELEASED)
            self.call("residency", c, rng.randrange(0, 2 * arb._footprints.get(c, 0) + 1))
            return
        elif roll < 0.095:
            c = rng.choice(CLIENTS)   # a job's seat: a member that does not answer EVICT joins
            on = c not in self.swappable
            (self.swappable.add if on else self.swappable.discard)(c)
            self.call("set_swappable", c, on)
            return
        super().random_event()

    def drain(self, rounds: int = 5000):
        """No new requests; dropped and reclaimed clients answer promptly unless silent."""
        for _ in range(rounds):
            arb = self.arb
            if not arb.waiting:
                return
            self.now += 0.01
            asked = [c for c in CLIENTS if arb.is_reclaiming(c) and c not in self.silent]
            draining = [c for c, h in arb.holders.items()
                        if h.drop_sent is not None and c not in self.silent]
            if asked:
                self.answer(asked[0])
            elif draining:
                self.call("release", draining[0])
            else:
                deadline = arb.next_deadline()
                assert deadline is not None, (
                    f"stuck: {arb.queue} wait, holders {arb.holders}, nothing is timed")
                self.now = max(self.now, deadline)
                self.call("tick")
        pytest.fail(f"waiters {self.arb.queue} still not served after {rounds} rounds")


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("seed", range(16))
def test_random_runs_with_swapping_keep_residency_within_the_budget(seed, mode):
    w = SwapWorld(seed * 41 + 7 + len(mode.value), mode)
    for _ in range(STEPS):
        w.random_event()
    w.drain()
    assert not w.arb.waiting
    assert len(w.r.granted) > 20


def test_the_random_runs_do_reclaim_refuse_and_run_alone():
    """So that the test above is not vacuous: across its seeds, clients are reclaimed and answer,
    silent ones are evicted after a Reclaim, and some waiter runs alone past idle bytes it may not
    ask for."""
    seen = dict.fromkeys(["reclaims", "answers", "lone", "evicted"], 0)
    for seed in range(10):
        for mode in (Mode.AUTO, Mode.SERIAL):
            w = SwapWorld(seed * 41 + 7 + len(mode.value), mode)
            for _ in range(STEPS):
                w.random_event()
            for k in seen:
                seen[k] += getattr(w, k)
    print(seen)
    assert seen["reclaims"] > 50 and seen["answers"] > 20 and seen["lone"] > 0 \
        and seen["evicted"] > 0, seen
