"""Jobs granted as one (policy/gang.py): table-driven cases, then seeded random runs of jobs of 1-4
members on 1-4 GPUs in every mode, with the invariants checked after every call (no partial
holder, ever; grants only in the global order) and progress (every job finishes)."""

from __future__ import annotations

import random

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Evict, Grant, Mode, Overdue
from xpushare.scheduler.policy.gang import FORM_TIMEOUT, Gangs, JobFormed, Phase

GiB = 2**30


class Gpu:
    def __init__(self, index: int, mode: Mode = Mode.SERIAL, tq: float = 1.0, capacity: int = 0):
        self.index = index
        self.arbiter = Arbiter(mode, tq, capacity=capacity, reserve=0, client_overhead=0)

    def __repr__(self):
        return f"gpu{self.index}"


def make(n: int, **kw):
    gpus = [Gpu(i, **kw) for i in range(n)]
    return gpus, Gangs(order=lambda g: g.index)


def check(g: Gangs) -> None:
    """No partial holder: a member holds a GPU only while its job holds every one of its seats;
    an acquiring job holds seats only before the one it asks for; a seat held says so in its
    arbiter."""
    for job in g.jobs.values():
        holding = [s for s in job.seats.values() if s.holding]
        if holding:
            assert job.phase in (Phase.RUNNING, Phase.DROPPING), (job.label, job.phase)
        if job.phase == Phase.RUNNING:
            assert all(s.grant is not None for s in job.seats.values()), job.label
        for s in job.seats.values():
            assert (s.grant is not None) == s.gpu.arbiter.holds(s), (job.label, s.gpu)
            assert s.holding <= set(s.members)
        if job.phase == Phase.ACQUIRING:
            order = sorted(job.seats.values(), key=lambda s: s.gpu.index)
            asked = [s.gpu.arbiter.state_of(s) == "waiting" for s in order]
            held = [s.grant is not None for s in order]
            assert sum(asked) <= 1, job.label
            if any(asked):
                k = asked.index(True)
                assert all(held[:k]) and not any(held[k:]), (job.label, held, asked)


def grants(out) -> list:
    return [(gpu.index, a.client) for gpu, a in out.actions if isinstance(a, Grant)]


def drops(out) -> list:
    return [(gpu.index, a.client, a.reason) for gpu, a in out.actions if isinstance(a, Drop)]


def setup_job(g, gpus, key, members, now=0.0, size=None):
    """members: name -> GPU indices it attaches."""
    for name, idx in members.items():
        g.join(name, key, key, size, 0, now)
        for i in idx:
            g.attach(name, gpus[i], now)


def test_a_lone_process_is_granted_and_released_as_before():
    gpus, g = make(1)
    setup_job(g, gpus, "p", {"p": [0]})
    assert grants(g.request("p", gpus[0], 0.0)) == [(0, "p")]
    assert g.holds("p", gpus[0])
    assert g.release("p", gpus[0], 0.1).actions == []
    assert not gpus[0].arbiter.holders and g.jobs["p"].phase == Phase.IDLE


def test_a_job_runs_only_once_it_holds_every_gpu_and_members_join_it_at_once():
    gpus, g = make(2)
    setup_job(g, gpus, "A", {"a0": [0], "a1": [1]})
    setup_job(g, gpus, "B", {"b0": [0], "b1": [1]})
    # B's rank 1 asks first: B takes GPU 0 first (the global order), then GPU 1.
    assert grants(g.request("b1", gpus[1], 0.0)) == [(1, "b1")]
    check(g)
    # A's rank 0 must wait: GPU 0 is B's.
    assert grants(g.request("a0", gpus[0], 0.0)) == []
    assert grants(g.request("a1", gpus[1], 0.0)) == []
    check(g)
    # B's rank 0 joins the run at once.
    assert grants(g.request("b0", gpus[0], 0.1)) == [(0, "b0")]
    # B's quantum ends: both of B's members are told, on both GPUs.
    out = g.on_gpu(gpus[0], gpus[0].arbiter.tick, now=1.2)
    out2 = g.on_gpu(gpus[1], gpus[1].arbiter.tick, now=1.2)
    told = sorted(drops(out) + drops(out2))
    assert told == [(0, "b0", DropReason.QUANTUM), (1, "b1", DropReason.QUANTUM)]
    check(g)
    # Nobody of A runs until both of B's members released.
    assert grants(g.release("b0", gpus[0], 1.25)) == []
    check(g)
    out = g.release("b1", gpus[1], 1.3)
    assert sorted(grants(out)) == [(0, "a0"), (1, "a1")]
    check(g)


def test_a_seat_granted_early_holds_its_quantum_until_the_job_has_them_all():
    gpus, g = make(2)
    setup_job(g, gpus, "C", {"c": [1]})
    setup_job(g, gpus, "A", {"a0": [0], "a1": [1]})
    g.request("c", gpus[1], 0.0)
    g.request("a0", gpus[0], 0.0)            # A holds GPU 0, waits for GPU 1
    assert gpus[0].arbiter.next_deadline() is None  # its quantum does not run yet
    out = g.on_gpu(gpus[1], gpus[1].arbiter.tick, now=1.1)
    assert drops(out) == [(1, "c", DropReason.QUANTUM)]
    out = g.release("c", gpus[1], 1.2)
    assert grants(out) == [(0, "a0")]
    assert gpus[0].arbiter.next_deadline() == pytest.approx(2.2)
    assert gpus[1].arbiter.next_deadline() == pytest.approx(2.2)


def test_a_job_of_known_size_waits_for_its_members_or_the_timeout():
    gpus, g = make(2)
    g.join("r0", "T", "T", 2, 0, 0.0)
    g.attach("r0", gpus[0], 0.0)
    assert grants(g.request("r0", gpus[0], 0.0)) == []
    g.join("r1", "T", "T", 2, 0, 1.0)       # counts once it attached a GPU
    assert g.jobs["T"].phase == Phase.IDLE and not g.jobs["T"].formed
    out = g.attach("r1", gpus[1], 1.0)
    assert [a for _, a in out.actions if isinstance(a, JobFormed)][0].complete
    assert grants(out) == [(0, "r0")]  # both seats held: r0 runs; r1 has asked nothing yet
    assert g.jobs["T"].phase == Phase.RUNNING and gpus[1].arbiter.holds(g.jobs["T"].seats[gpus[1]])
    g.join("s0", "S", "S", 2, 0, 2.0)
    g.attach("s0", gpus[1], 2.0)
    g.request("s0", gpus[1], 2.0)
    assert g.next_deadline() == pytest.approx(2.0 + FORM_TIMEOUT)
    out = g.tick(2.0 + FORM_TIMEOUT)
    formed = [a for _, a in out.actions if isinstance(a, JobFormed)]
    assert formed and not formed[0].complete
    assert grants(out) == [(1, "s0")]


def test_preempted_while_acquiring_gives_every_seat_up_and_starts_again():
    gpus, g = make(2)
    setup_job(g, gpus, "C", {"c": [1]})
    setup_job(g, gpus, "A", {"a0": [0], "a1": [1]})
    setup_job(g, gpus, "V", {"v": [0]})
    g.set_priority("v", 5, 0.0)
    g.request("c", gpus[1], 0.0)
    g.request("a0", gpus[0], 0.0)            # A holds GPU 0 (held off), waits for GPU 1
    out = g.request("v", gpus[0], 0.5)       # the VIP preempts A's seat: nobody to tell
    assert drops(out) == [] and grants(out) == [(0, "v")]
    check(g)
    assert g.jobs["A"].phase == Phase.ACQUIRING


def test_a_gpu_attached_while_running_drops_the_job_to_acquire_it_in_order():
    gpus, g = make(2)
    setup_job(g, gpus, "P", {"p": [1]})
    assert grants(g.request("p", gpus[1], 0.0)) == [(1, "p")]
    out = g.attach("p", gpus[0], 0.1)
    assert drops(out) == [(1, "p", DropReason.ADMIN)]
    g.request("p", gpus[0], 0.15)
    check(g)
    out = g.release("p", gpus[1], 0.2)
    assert grants(out) == [(0, "p")]
    check(g)


def test_a_member_that_leaves_hands_its_gpus_on():
    gpus, g = make(1)
    setup_job(g, gpus, "A", {"a": [0]})
    setup_job(g, gpus, "B", {"b": [0]})
    g.request("a", gpus[0], 0.0)
    g.request("b", gpus[0], 0.0)
    assert grants(g.leave("a", 0.1)) == [(0, "b")]
    assert "A" not in g.jobs


def test_an_evicted_seat_evicts_its_silent_members():
    gpus, g = make(1)
    setup_job(g, gpus, "A", {"a0": [0], "a1": [0]})
    setup_job(g, gpus, "B", {"b": [0]})
    g.request("a0", gpus[0], 0.0)
    g.request("a1", gpus[0], 0.0)
    g.request("b", gpus[0], 0.0)
    g.on_gpu(gpus[0], gpus[0].arbiter.tick, now=1.0)   # A is dropped
    g.release("a0", gpus[0], 1.1)                        # a1 stays silent
    out = g.on_gpu(gpus[0], gpus[0].arbiter.tick, now=3.5)
    assert [(a.client) for _, a in out.actions if isinstance(a, Evict)] == ["a1"]
    assert grants(out) == [(0, "b")]


# -------------------------------------------------------------------------- seeded random runs
class Run:
    """Jobs of 1-4 members on 1-4 GPUs doing steps that need every member at once (a collective):
    a job advances only while all its members hold all their GPUs. Members ask for their GPUs
    whenever they have work, release at once when told to drop, and now and then release early."""

    def __init__(self, seed: int, mode: Mode):
        self.rng = rng = random.Random(seed)
        n = rng.randint(1, 4)
        cap = rng.choice([0, 8 * GiB, 40 * GiB]) if mode == Mode.AUTO else 0
        self.gpus, self.g = make(n, mode=mode, tq=0.5, capacity=cap)
        self.now = 0.0
        self.steps: dict[str, int] = {}
        self.members: dict[str, list[str]] = {}
        self.uses: dict[str, list] = {}
        self.held: set = set()
        for j in range(rng.randint(1, 5)):
            key = f"J{j}"
            names = [f"{key}m{i}" for i in range(rng.randint(1, 4))]
            self.members[key], self.steps[key] = names, rng.randint(5, 40)
            size = len(names) if rng.random() < 0.5 else None
            for m in names:
                k = rng.choice([1, 1, 1, 2]) if n > 1 else 1
                self.uses[m] = rng.sample(self.gpus, k)
                self.apply(self.g.join(m, key, key, size, 0, self.now))
                for gpu in self.uses[m]:
                    self.apply(self.g.attach(m, gpu, self.now))
                    self.apply(self.g.set_footprint(m, gpu, rng.randint(0, 12) * GiB, self.now))
                if rng.random() < 0.2:
                    self.apply(self.g.set_priority(m, rng.randint(-1, 2), self.now))

    def apply(self, out) -> None:
        check(self.g)
        for gpu, a in out.actions:
            if isinstance(a, Grant):
                assert (a.client, gpu) not in self.held, "granted twice"
                self.held.add((a.client, gpu))
            elif isinstance(a, Drop):
                self.apply(self.g.release(a.client, gpu, self.now))
                self.held.discard((a.client, gpu))
            elif isinstance(a, Evict):
                raise AssertionError(f"{a.client} evicted: its job never got stuck draining")

    def running(self, key) -> bool:
        return all((m, gpu) in self.held for m in self.members[key] for gpu in self.uses[m])

    def go(self) -> None:
        for _ in range(20000):
            live = [k for k, left in self.steps.items() if left > 0]
            if not live:
                return
            for key in live:
                for m in self.members[key]:
                    for gpu in self.uses[m]:
                        if (m, gpu) not in self.held and self.g.state_of(m, gpu) == "idle":
                            self.apply(self.g.request(m, gpu, self.now))
            self.now += 0.05
            for gpu in self.gpus:
                d = gpu.arbiter.next_deadline()
                if d is not None and d <= self.now:
                    self.apply(self.g.on_gpu(gpu, gpu.arbiter.tick, now=self.now))
            if (d := self.g.next_deadline()) is not None and d <= self.now:
                self.apply(self.g.tick(self.now))
            for key in live:
                if not self.running(key):
                    continue
                self.steps[key] -= 1
                done = self.steps[key] == 0
                if done or self.rng.random() < 0.05:   # finished, or idle for a moment
                    for m in self.members[key]:
                        for gpu in self.uses[m]:
                            self.held.discard((m, gpu))
                            self.apply(self.g.release(m, gpu, self.now))
                if done:
                    for m in self.members[key]:
                        self.apply(self.g.leave(m, self.now))
        raise AssertionError(f"jobs left unfinished: {self.steps}")


@pytest.mark.parametrize("mode", [Mode.SERIAL, Mode.AUTO, Mode.OFF])
@pytest.mark.parametrize("seed", range(40))
def test_random_jobs_never_hold_partly_and_all_finish(mode, seed):
    run = Run(seed, mode)
    run.go()
    assert not run.g.jobs
    for gpu in run.gpus:
        assert not gpu.arbiter.holders and not gpu.arbiter.waiting


def test_overdue_reaches_the_members_that_hold():
    gpus, g = make(1)
    setup_job(g, gpus, "A", {"a": [0]})
    setup_job(g, gpus, "B", {"b": [0]})
    g.request("a", gpus[0], 0.0)
    g.request("b", gpus[0], 0.0)
    g.on_gpu(gpus[0], gpus[0].arbiter.tick, now=1.0)
    out = g.on_gpu(gpus[0], gpus[0].arbiter.tick, now=2.1)
    assert [a.client for _, a in out.actions if isinstance(a, Overdue)] == ["a"]
