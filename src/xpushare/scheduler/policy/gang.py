"""Jobs: clients that must run together, granted the GPUs they use all at once or not at all.

(long: a little over 400 lines. The records are in gangmodel.py, and the routing of arbiter
actions from seats to members and the members' residency in gangroute.py; the job states stay
here, in one place.)

Pure, like the arbiters under it: every call takes `now` and returns an Outcome, the actions the
caller carries out (each with the GPU it concerns) and the GPUs whose timers may have moved.

Every client is a member of one job (the scheduler forms jobs: a torchrun run, a pod, an explicit
name, or the process alone). On each GPU its members use, a job is one client of that GPU's Arbiter,
its Seat: the seat's footprint is the sum of its members' there, its priority and share the highest
of theirs. The arbiters decide, seat by seat, as they always have (modes, quanta, priorities,
shares, fitting); this layer turns their decisions on seats into decisions on members:

- A job ACQUIRING its GPUs asks for its seats one at a time, in one global order of GPUs
  (`order`). A seat granted before the others is held with its quantum stopped
  (Arbiter.hold_off); nobody is told yet.
- When the last seat is granted the job is RUNNING: every seat gets a fresh quantum at once
  (Arbiter.resume) and each member is granted the GPUs it asked for. While it runs, a member's
  request is granted at once.
- A drop of any seat drops the job (DROPPING): every member holding a GPU is sent DROP_LOCK, and
  each seat is released when its members have released it. A drop of a seat while the job is still
  acquiring releases every seat it holds and starts again from the first.
- When no member holds anything, the job releases every seat (IDLE): seats are dropped together.

Deadlock freedom. A job waits for a seat only while every seat it holds comes before that one in
the global order; a job holding seats that come after a GPU it needs (a member attached a GPU that
sorts earlier) gives them all up first. So a job holding the seat another waits for is either
RUNNING (it gives its seats up at the end of its quantum, or sooner) or ACQUIRING a seat later in
the order. Follow the chain of "waits for a seat held by": each step goes to a later GPU, so it
ends, at a job that runs or at a seat nobody holds; no cycle of waits exists, and some job always
progresses. A member is never granted while its job lacks a seat (no partial holder): the members
of a distributed job never wait in a collective for a peer that waits for the GPU.

A job whose size is known (a torchrun run's local world size) is not acquired before that many
members joined, or until FORM_TIMEOUT passed since its first member; then it runs as it is (a
JobFormed action says which, for the log).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from ...wire.protocol import DropReason
from .gangmodel import FORM_TIMEOUT, Job, JobFormed, Member, Outcome, Phase, Seat
from .gangroute import SeatRouting
from .model import Action, Drop, Grant, SwitchReport

__all__ = ["FORM_TIMEOUT", "Gangs", "Job", "JobFormed", "Member", "Outcome", "Phase", "Seat"]

class Gangs(SeatRouting):
    """Every job of the node and the seats they hold. `order(gpu)`: the global order of GPUs (a
    sort key); a GPU object has an `arbiter` attribute."""

    def __init__(self, order: Callable[[Any], Any], form_timeout: float = FORM_TIMEOUT):
        self.order = order
        self.form_timeout = form_timeout
        self.jobs: dict[Hashable, Job] = {}
        self.job_of: dict[Any, Job] = {}
        self._forming: set[Job] = set()  # jobs waiting for members (few): next_deadline reads them
        self._queue: deque = deque()
        self._out: Outcome | None = None
        self._now = 0.0

    # -- membership ---------------------------------------------------------------------------
    def join(self, member, key: Hashable, label: str, size: int | None, priority: int,
             now: float, owner=None, own: int | None = None) -> Outcome:
        """`member` belongs to the job `key` (made on its first member); owner, own: its user and
        the priority it gave itself (Arbiter.set_owner)."""
        self._begin(now)
        job = self.jobs.get(key)
        if job is None:
            job = self.jobs[key] = Job(key, label, size, now, formed=not size or size <= 1)
            if not job.formed:
                self._forming.add(job)
        elif size and (job.size or 0) < size:
            job.size = size
        job.members[member] = Member(priority=priority, owner=owner,
                                     own=priority if own is None else own)
        self.job_of[member] = job
        return self._end()  # it counts for the job's size once it attached a GPU (attach)

    def attach(self, member, gpu, now: float) -> Outcome:
        """`member` uses `gpu`; its job gets a seat there (asked for in order)."""
        self._begin(now)
        job = self.job_of[member]
        rec = job.members[member]
        rec.gpus.add(gpu)
        seat = job.seats.get(gpu)
        if seat is None:
            seat = job.seats[gpu] = Seat(job, gpu)
            seat.members[member] = 0
            self._push(seat)
            self._seat_added(job, seat)
        else:
            seat.members.setdefault(member, 0)
            self._seat_swappable(seat)
        self._try_form(job)
        return self._end()

    def detach(self, member, gpu, now: float) -> Outcome:
        """`member` no longer uses `gpu` (its device ordinal now names another GPU)."""
        self._begin(now)
        job = self.job_of[member]
        self._forget_on(job, member, gpu)
        self._reconsider(job)
        return self._end()

    def leave(self, member, now: float) -> Outcome:
        """`member` is gone (disconnected); a job with no member left is forgotten."""
        self._begin(now)
        job = self.job_of.pop(member, None)
        if job is not None:
            for gpu in list(job.members[member].gpus):
                self._forget_on(job, member, gpu)
            del job.members[member]
            if job.members:
                self._reconsider(job)
            else:
                del self.jobs[job.key]
                self._forming.discard(job)
        return self._end()

    # -- a member's lock messages -------------------------------------------------------------
    def request(self, member, gpu, now: float) -> Outcome:
        self._begin(now)
        job = self.job_of[member]
        seat, rec = job.seats[gpu], job.members[member]
        if member in seat.holding or gpu in rec.wants:
            return self._end()
        if job.phase == Phase.RUNNING:
            self._grant_member(seat, member)
        else:
            rec.wants.add(gpu)
            if job.phase == Phase.IDLE and job.formed:
                self._acquire(job)
        return self._end()

    def release(self, member, gpu, now: float, report: SwitchReport | None = None) -> Outcome:
        self._begin(now)
        job = self.job_of[member]
        seat = job.seats[gpu]
        if member in seat.holding:
            seat.holding.discard(member)
            job.members[member].held_since.pop(gpu, None)
            seat.report = report
            self._reconsider(job)
        return self._end()

    # -- what the scheduler sets on a member ----------------------------------------------------
    def set_priority(self, member, priority: int, now: float) -> Outcome:
        self._begin(now)
        job = self.job_of[member]
        job.members[member].priority = job.members[member].own = priority
        for seat in job.seats.values():
            seat.gpu.arbiter.set_owner(seat, job.owner(), job.own_priority())
            self._call(seat.gpu, seat.gpu.arbiter.set_priority, seat, job.priority())
        return self._end()

    def set_share(self, member, share: float | None, now: float) -> Outcome:
        self._begin(now)
        job = self.job_of[member]
        job.members[member].share = share
        for seat in job.seats.values():
            self._call(seat.gpu, seat.gpu.arbiter.set_share, seat, job.share())
        return self._end()

    def set_footprint(self, member, gpu, nbytes: int, now: float) -> Outcome:
        self._begin(now)
        seat = self.job_of[member].seats[gpu]
        seat.members[member] = nbytes
        if seat.resident.get(member, 0) > nbytes:
            seat.resident[member] = nbytes
        self._call(gpu, gpu.arbiter.set_footprint, seat, sum(seat.members.values()))
        return self._end()

    # -- GPU-wide events and time ---------------------------------------------------------------
    def on_gpu(self, gpu, event: Callable[..., list[Action]], *args, now: float) -> Outcome:
        """An event of gpu's arbiter that names no member (tick, set_mode, set_tq,
        set_capacity), its actions turned into the members'."""
        self._begin(now)
        self._call(gpu, event, *args)
        return self._end()

    def next_deadline(self) -> float | None:
        """When the first job still waiting for members stops waiting."""
        return min((j.since + self.form_timeout for j in self._forming), default=None)

    def tick(self, now: float) -> Outcome:
        self._begin(now)
        for job in list(self._forming):
            if now >= job.since + self.form_timeout:
                self._form(job, complete=False)
        return self._end()

    # -- queries ------------------------------------------------------------------------------
    def state_of(self, member, gpu) -> str:
        job = self.job_of.get(member)
        if job is None or gpu not in job.seats:
            return "idle"
        if member in job.seats[gpu].holding:
            return "holding"
        return "waiting" if gpu in job.members[member].wants else "idle"

    def seat_of(self, member, gpu) -> Seat | None:
        """The seat of member's job on gpu (the client gpu's arbiter knows), None if none."""
        job = self.job_of.get(member)
        return None if job is None else job.seats.get(gpu)

    def holds(self, member, gpu) -> bool:
        return self.state_of(member, gpu) == "holding"

    def held_since(self, member, gpu) -> float | None:
        job = self.job_of.get(member)
        return None if job is None else job.members[member].held_since.get(gpu)

    # -- the machinery --------------------------------------------------------------------------
    def _begin(self, now: float) -> None:
        assert self._out is None, "Gangs is not re-entrant"
        self._out, self._now = Outcome(), now

    def _end(self) -> Outcome:
        while self._queue:
            gpu, action = self._queue.popleft()
            self._route(gpu, action)
        out, self._out = self._out, None
        return out

    def _emit(self, gpu, action) -> None:
        self._out.actions.append((gpu, action))

    def _call(self, gpu, event: Callable[..., list[Action]], *args, **kw) -> None:
        """An arbiter event; its actions are routed after what is under way (FIFO)."""
        self._out.gpus.add(gpu)
        for action in event(*args, self._now, **kw):
            self._queue.append((gpu, action))

    def _ordered(self, job: Job) -> list[Seat]:
        return sorted(job.seats.values(), key=lambda s: self.order(s.gpu))

    def _push(self, seat: Seat) -> None:
        """What the seat's arbiter must know of a new (or withdrawn) seat."""
        job, arb = seat.job, seat.gpu.arbiter
        arb.set_owner(seat, job.owner(), job.own_priority())
        self._call(seat.gpu, arb.set_priority, seat, job.priority())
        if job.share() is not None:
            self._call(seat.gpu, arb.set_share, seat, job.share())
        if any(seat.members.values()):
            self._call(seat.gpu, arb.set_footprint, seat, sum(seat.members.values()))
        self._seat_swappable(seat, fresh=True)

    def _try_form(self, job: Job) -> None:
        """Formed once `size` members have each attached a GPU: a member's seats exist before the
        job first runs (a seat added while it runs drops it)."""
        if not job.formed and sum(1 for m in job.members.values() if m.gpus) >= (job.size or 0):
            self._form(job, complete=True)

    def _form(self, job: Job, complete: bool) -> None:
        job.formed = True
        self._forming.discard(job)
        self._emit(None, JobFormed(job, self._now - job.since, complete))
        if job.phase == Phase.IDLE and self._wanted(job):
            self._acquire(job)

    @staticmethod
    def _wanted(job: Job) -> bool:
        return any(m.wants for m in job.members.values())

    def _acquire(self, job: Job) -> None:
        job.phase = Phase.ACQUIRING
        self._advance(job)

    def _advance(self, job: Job) -> None:
        """ACQUIRING: ask for the first seat in order not granted, unless it is asked for
        already; when every seat is granted, run."""
        for seat in self._ordered(job):
            if seat.grant is not None:
                continue
            if seat.gpu.arbiter.state_of(seat) != "waiting":
                self._call(seat.gpu, seat.gpu.arbiter.request, seat)
            return
        job.phase = Phase.RUNNING
        if len(job.seats) > 1:  # quanta stopped while the others were acquired start together
            for seat in job.seats.values():
                seat.gpu.arbiter.resume(seat, self._now)
                self._out.gpus.add(seat.gpu)
        for member, rec in job.members.items():
            for gpu in list(rec.wants):
                self._grant_member(job.seats[gpu], member)

    def _grant_member(self, seat: Seat, member) -> None:
        rec = seat.job.members[member]
        rec.wants.discard(seat.gpu)
        rec.held_since[seat.gpu] = self._now
        seat.holding.add(member)
        prefetch = seat.grant.prefetch and member not in seat.prefetched
        seat.prefetched.add(member)
        self._emit(seat.gpu, Grant(member, seat.grant.quantum, prefetch))

    def _seat_granted(self, seat: Seat, grant: Grant) -> None:
        job = seat.job
        seat.grant, seat.holding, seat.prefetched = grant, set(), set()
        if job.phase != Phase.ACQUIRING or job.seats.get(seat.gpu) is not seat:
            self._release_seat(seat)  # asked for by a run that ended meanwhile
            return
        if any(s.grant is None for s in job.seats.values()):
            seat.gpu.arbiter.hold_off(seat)
        self._advance(job)

    def _seat_dropped(self, seat: Seat, drop: Drop) -> None:
        job = seat.job
        if job.phase == Phase.RUNNING:
            job.phase = Phase.DROPPING
            seat.evicting = drop.evict
            seat.evict_mib = drop.evict_mib if len(seat.holding) == 1 else 0  # shared: all
            gang = len(job.members) > 1 or len(job.seats) > 1
            for s in self._ordered(job):
                evict = drop.evict and s is seat
                mib = seat.evict_mib if evict else 0
                for m in s.holding:
                    self._emit(s.gpu, Drop(m, drop.reason, evict, gang, evict_mib=mib))
            self._reconsider(job)
        elif job.phase == Phase.ACQUIRING:
            self._restart(job)
        elif job.phase == Phase.DROPPING:
            self._reconsider(job)  # members were told at the first drop
        else:
            self._release_seat(seat)

    def _seat_added(self, job: Job, seat: Seat) -> None:
        """A member attached a GPU new to its job."""
        if job.phase == Phase.ACQUIRING:
            key = self.order(seat.gpu)
            if any(self.order(s.gpu) > key and (s.grant is not None or
                                                s.gpu.arbiter.state_of(s) == "waiting")
                   for s in job.seats.values() if s is not seat):
                self._restart(job)  # it sorts before a seat held or asked for: start again
        elif job.phase == Phase.RUNNING:
            # Running without this GPU would make a partial holder: drop the job and acquire
            # all of its seats again, in order.
            self._seat_dropped(seat, Drop(seat, DropReason.ADMIN))

    def _restart(self, job: Job) -> None:
        """ACQUIRING again from the first seat: give up every seat held or asked for."""
        for s in job.seats.values():
            if s.grant is not None:
                self._release_seat(s)
            elif s.gpu.arbiter.state_of(s) == "waiting":
                self._call(s.gpu, s.gpu.arbiter.disconnect, s)  # withdraw the request
                self._push(s)
        job.phase = Phase.ACQUIRING if self._wanted(job) else Phase.IDLE
        if job.phase == Phase.ACQUIRING:
            self._advance(job)

    def _release_seat(self, seat: Seat) -> None:
        self._seat_releasing(seat)
        seat.grant, seat.holding = None, set()
        self._call(seat.gpu, seat.gpu.arbiter.release, seat, report=seat.report)
        seat.report = None

    def _reconsider(self, job: Job) -> None:
        """After a member released, left or was evicted: release what is no longer used."""
        if job.phase == Phase.RUNNING:
            if any(s.holding for s in job.seats.values()):
                return
            for s in job.seats.values():
                self._release_seat(s)
            job.phase = Phase.IDLE
        elif job.phase == Phase.DROPPING:
            for s in job.seats.values():
                if s.grant is not None and not s.holding:
                    self._release_seat(s)
            if any(s.grant is not None for s in job.seats.values()):
                return
            job.phase = Phase.IDLE
        elif job.phase == Phase.ACQUIRING:
            if not self._wanted(job):
                self._restart(job)
            else:
                self._advance(job)
            return
        if job.formed and self._wanted(job):
            self._acquire(job)

    def _forget_on(self, job: Job, member, gpu) -> None:
        """`member` leaves `gpu`: its hold and request there go; a seat with no member left is
        disconnected from its arbiter (which hands the GPU on)."""
        rec = job.members[member]
        rec.gpus.discard(gpu)
        rec.wants.discard(gpu)
        rec.held_since.pop(gpu, None)
        seat = job.seats.get(gpu)
        if seat is None:
            return
        seat.members.pop(member, None)
        seat.holding.discard(member)
        self._seat_forgets(seat, member)
        if seat.members:
            self._call(gpu, gpu.arbiter.set_footprint, seat, sum(seat.members.values()))
            self._seat_swappable(seat)
            return
        del job.seats[gpu]
        seat.grant = None
        self._call(gpu, gpu.arbiter.disconnect, seat)

