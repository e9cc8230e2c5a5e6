"""Residency through jobs (policy/gangroute.py): an arbiter's client is a job's seat, whose bytes on
the GPU are its members'. A seat's Reclaim goes to each member with memory there, and is answered
once all of them have; a seat answers EVICT only when all its members do."""

import pytest

from xpushare.scheduler.policy import EVICT_AFTER_QUANTA, Backoff, Drop, Evict, Grant, Mode, Reclaim

from test_policy_gang import Run, check, grants, make, setup_job

GiB = 2**30
TQ = 1.0


def two_member_job(swappable=("j0", "j1", "w"), j0=4, j1=4, w=12):
    """Job J (j0, j1) ran on GPU 0 of 16 GiB and released: its memory stays there."""
    gpus, g = make(1, mode=Mode.AUTO, capacity=16 * GiB)
    gpu = gpus[0]
    setup_job(g, gpus, "J", {"j0": [0], "j1": [0]})
    setup_job(g, gpus, "W", {"w": [0]})
    for m in swappable:
        g.set_swappable(m, True, 0.0)
    for m, size in (("j0", j0), ("j1", j1), ("w", w)):
        g.set_footprint(m, gpu, size * GiB, 0.0)
    assert grants(g.request("j0", gpu, 0.0)) == [(0, "j0")]
    assert grants(g.request("j1", gpu, 0.0)) == [(0, "j1")]
    g.release("j0", gpu, 0.5)
    g.release("j1", gpu, 0.6)
    return gpu, g, g.jobs["J"].seats[gpu]


def reclaims(out) -> list:
    return [(gpu.index, a.client) for gpu, a in out.actions if isinstance(a, Reclaim)]


def test_a_jobs_seat_is_reclaimed_from_every_member_and_answered_when_all_have():
    gpu, g, seat = two_member_job()
    assert gpu.arbiter.resident_bytes(seat) == 8 * GiB
    out = g.request("w", gpu, 1.0)
    assert reclaims(out) == [(0, "j0"), (0, "j1")] and grants(out) == []
    out = g.residency("j1", gpu, 0, 1.1)
    assert out.actions == [] and gpu.arbiter.is_reclaiming(seat)
    out = g.residency("j0", gpu, 0, 1.2)
    assert grants(out) == [(0, "w")] and not gpu.arbiter.is_reclaiming(seat)
    assert gpu.arbiter.resident_bytes(seat) == 0
    check(g)
    # Both members bring their memory back at the job's next grant.
    g.release("w", gpu, 1.5)
    g.residency("w", gpu, 0, 1.6)
    out = g.request("j0", gpu, 2.0)
    assert [(a.client, a.prefetch) for _, a in out.actions if isinstance(a, Grant)] == \
        [("j0", True)]
    out = g.request("j1", gpu, 2.1)
    assert [(a.client, a.prefetch) for _, a in out.actions if isinstance(a, Grant)] == \
        [("j1", True)]


def test_the_seat_counts_what_each_member_keeps_and_a_refusal_pins_it():
    gpu, g, seat = two_member_job(w=13)
    g.request("w", gpu, 1.0)                                   # 13 + 8: 5 GiB short
    g.residency("j0", gpu, 0, 1.1)
    out = g.residency("j1", gpu, 3 * GiB, 1.2, refused=True)
    assert gpu.arbiter.resident_bytes(seat) == 3 * GiB
    assert grants(out) == [(0, "w")]                           # 13 + 3 fit
    g.release("w", gpu, 2.0)                                   # w keeps its 13 GiB
    g.residency("w", gpu, 13 * GiB, 2.0)
    out = g.request("j0", gpu, 2.1)                            # J needs 8 - 3 more: w goes
    assert reclaims(out) == [(0, "w")]


def test_members_with_nothing_on_the_gpu_are_not_asked():
    gpu, g, seat = two_member_job(j0=0, j1=8)
    assert reclaims(g.request("w", gpu, 1.0)) == [(0, "j1")]
    assert grants(g.residency("j1", gpu, 0, 1.1)) == [(0, "w")]


def test_a_seat_answers_evict_only_when_all_its_members_do():
    gpu, g, seat = two_member_job(swappable=("j0", "w"))
    assert gpu.arbiter.resident_bytes(seat) == 0              # uncounted, as before
    assert grants(g.request("w", gpu, 1.0)) == [(0, "w")]
    g.release("w", gpu, 1.5)
    g.set_swappable("j1", True, 2.0)      # now every member answers: what they left counts
    assert gpu.arbiter.resident_bytes(seat) == 8 * GiB
    g.residency("j1", gpu, 2 * GiB, 2.1)  # a member reports on its own (a late swap-out)
    assert gpu.arbiter.resident_bytes(seat) == 6 * GiB
    assert reclaims(g.request("j0", gpu, 3.0)) == [(0, "w")]   # 8 + w's 12


def test_a_member_silent_after_its_reclaim_is_evicted_and_the_others_are_not():
    gpu, g, seat = two_member_job()
    g.request("w", gpu, 1.0)
    g.residency("j0", gpu, 0, 1.1)
    deadline = 1.0 + EVICT_AFTER_QUANTA * TQ
    assert gpu.arbiter.next_deadline() == deadline
    out = g.on_gpu(gpu, gpu.arbiter.tick, now=deadline)
    assert [(a.client, type(a)) for _, a in out.actions] == [
        ("j1", Evict), ("j0", Backoff), ("j1", Backoff), ("w", Grant)]   # its owner's strike
    out = g.leave("j1", deadline + 0.1)                      # its connection closed
    check(g)
    assert "J" in g.jobs and gpu.arbiter.resident_bytes(seat) == 0


def test_a_member_leaving_answers_for_itself():
    gpu, g, seat = two_member_job()
    g.request("w", gpu, 1.0)
    g.residency("j0", gpu, 0, 1.1)
    assert grants(g.leave("j1", 1.2)) == [(0, "w")]


@pytest.mark.parametrize("report, left", [(None, 0), (1, 1)])
def test_a_job_dropped_with_evict_leaves_what_its_members_reported(report, left):
    gpus, g = make(1, mode=Mode.AUTO, capacity=16 * GiB)
    gpu = gpus[0]
    setup_job(g, gpus, "J", {"j0": [0], "j1": [0]})
    setup_job(g, gpus, "W", {"w": [0]})
    for m, size in (("j0", 4), ("j1", 4), ("w", 12)):
        g.set_swappable(m, True, 0.0)
        g.set_footprint(m, gpu, size * GiB, 0.0)
    g.request("j0", gpu, 0.0)
    g.request("j1", gpu, 0.0)
    assert grants(g.request("w", gpu, 0.1)) == []
    out = g.on_gpu(gpu, gpu.arbiter.tick, now=1.0)
    assert sorted((a.client, a.evict) for _, a in out.actions if isinstance(a, Drop)) == \
        [("j0", True), ("j1", True)]
    if report is not None:
        g.residency("j0", gpu, report * GiB, 1.1)          # RESIDENCY before LOCK_RELEASED
    g.release("j0", gpu, 1.2)
    out = g.release("j1", gpu, 1.3)
    assert grants(out) == [(0, "w")]
    seat = g.jobs["J"].seats[gpu]
    assert gpu.arbiter.resident_bytes(seat) == left * GiB


class SwapRun(Run):
    """test_policy_gang's random jobs, whose members answer EVICT (most of them) at once: with a
    part left on the GPU now and then, or refusing."""

    def __init__(self, seed, mode):
        super().__init__(seed, mode)
        for key, names in self.members.items():
            for m in names:
                if self.rng.random() < 0.8:
                    self.apply(self.g.set_swappable(m, True, self.now))
        self.asked = 0

    def apply(self, out) -> None:
        answers = []
        for gpu, a in out.actions:
            if isinstance(a, Reclaim):
                assert not self.g.holds(a.client, gpu), f"{a}: reclaimed while it holds"
                self.asked += 1
                answers.append((a.client, gpu))
        super().apply(out)
        for gpu in self.gpus:
            arb = gpu.arbiter
            seats = [s for j in self.g.jobs.values() for s in j.seats.values() if s.gpu is gpu]
            assert arb.resident_total() == sum(arb.resident_bytes(s) for s in seats)
        for m, gpu in answers:
            kind = self.rng.random()
            seat = self.g.seat_of(m, gpu)
            fp = seat.members.get(m, 0) if seat is not None else 0
            self.apply(self.g.residency(m, gpu, 0 if kind < 0.7 else fp // 2, self.now,
                                        refused=kind > 0.9))


@pytest.mark.parametrize("seed", range(16))
def test_random_jobs_that_swap_never_hold_partly_and_all_finish(seed):
    run = SwapRun(seed, Mode.AUTO)
    run.go()
    assert not run.g.jobs


def test_the_random_jobs_do_reclaim():
    """So that the test above is not vacuous: its runs route reclaims to members."""
    asked = 0
    for seed in range(16):
        run = SwapRun(seed, Mode.AUTO)
        run.go()
        asked += run.asked
    assert asked > 40, asked
