"""Jobs (gang.py), continued: the routing of arbiter actions from seats to members, and where the
members' memory on each GPU is (Gangs inherits SeatRouting).

An arbiter's clients are seats; its actions on a seat become actions on the seat's members:
- Grant, Drop, Overdue and a holder's Evict as gang.py describes;
- Reclaim(seat): Reclaim(member) for each member with bytes on that GPU, as far as the reports
  and releases say. The seat's reclaim is answered (Arbiter.residency on the seat) once every
  member it went to has answered or left: the seat's bytes are the sum of its members', REFUSED if
  any member's was; a seat none of whose members has bytes there is answered at once;
- Evict(seat) for a reclaim left unanswered: Evict(member) for each member that did not answer;
- Backoff(seat) (its owner lost idle residency, backoff.py): Backoff(member) for each member.

Residency. A seat answers EVICT (Arbiter.set_swappable) when every member of it does. While it is
not held, the arbiter counts its members' bytes: at the seat's release each member leaves its
footprint there, or, when its members were told to drop with EVICT, what it reported since (else
0), which the arbiter hears right before the release; reports that come while the seat is not held
(answers, or a swap-out after LOCK_RELEASED) are passed on as the seat's new sum, each member's
cut to what it was counted for (a report lowers it, never raises it). A report from a
member while its seat holds counts only after a drop with EVICT (the swap-in at a grant counts its
footprint, as the holder's seat does).
"""

from __future__ import annotations

from .gangmodel import Outcome, Phase, Seat
from .model import Backoff, Drop, Evict, Grant, Overdue, Reclaim, kept_after_eviction


class SeatRouting:
    """Gangs' routing of seat actions and the members' residency (a mixin: the machinery, _begin,
    _end, _call, _emit and the seat events, are gang.py's)."""

    # -- what members report of their memory ---------------------------------------------------
    def set_swappable(self, member, swappable: bool, now: float) -> Outcome:
        """Whether `member` answers EVICT (its HELLO's SWAP); its seats answer when all their
        members do."""
        self._begin(now)
        job = self.job_of[member]
        job.members[member].swappable = bool(swappable)
        for seat in job.seats.values():
            if member in seat.members:
                self._seat_swappable(seat)
        return self._end()

    def residency(self, member, gpu, resident: int, now: float, refused: bool = False) -> Outcome:
        """`member` has `resident` bytes of its memory on `gpu` now (RESIDENCY; cut to its
        footprint there). refused: its swap-out left memory that could not move."""
        self._begin(now)
        job = self.job_of.get(member)
        seat = None if job is None else job.seats.get(gpu)
        if seat is not None and member in seat.members:
            resident = min(max(0, resident), seat.members[member])
            if seat.grant is not None:   # held: what stays after a drop with EVICT
                if seat.evicting and job.phase == Phase.DROPPING:
                    seat.resident[member] = resident
                    seat.refused |= refused
            else:   # a report lowers what it is counted for, never raises it (backoff.py)
                seat.resident[member] = min(resident, seat.resident.get(member, 0))
                if seat.reclaim is None:
                    self._tell_resident(seat, refused)
                else:
                    seat.refused |= refused
                    self._answered(seat, member)
        return self._end()

    def _tell_resident(self, seat: Seat, refused: bool = False) -> None:
        if seat.swappable:
            arb = seat.gpu.arbiter
            self._call(seat.gpu, arb.residency, seat, sum(seat.resident.values()), refused=refused)

    def _answered(self, seat: Seat, member) -> None:
        """`member` answered the seat's reclaim, or left: when nobody is left to answer, the seat
        answers."""
        seat.reclaim.discard(member)
        if not seat.reclaim:
            seat.reclaim = None
            self._tell_resident(seat, seat.refused)

    def _seat_swappable(self, seat: Seat, fresh: bool = False) -> None:
        """Tell the seat's arbiter whether the seat answers EVICT, when that changed (fresh: the
        arbiter knows nothing of the seat), with its members' bytes when it starts to."""
        job = seat.job
        swappable = bool(seat.members) and all(job.members[m].swappable for m in seat.members)
        if swappable == seat.swappable and not fresh:
            return
        seat.swappable = swappable
        if not swappable and fresh:
            return
        left = sum(seat.resident.values()) if swappable and seat.grant is None else 0
        self._call(seat.gpu, seat.gpu.arbiter.set_swappable, seat, swappable, resident=left)

    def _seat_releasing(self, seat: Seat) -> None:
        """The seat is about to be released: what each member leaves on the GPU (its footprint, or
        after a drop with EVICT what it reported, else 0, or what a lone member asked to move only
        part keeps if it moves just that), told to the arbiter first."""
        for member, footprint in seat.members.items():
            if not seat.evicting:
                seat.resident[member] = footprint
            else:
                seat.resident.setdefault(member, kept_after_eviction(footprint, seat.evict_mib))
        self._tell_resident(seat, seat.refused)   # the arbiter keeps it after a drop with EVICT
        seat.evicting = seat.refused = False
        seat.evict_mib = 0

    def _seat_forgets(self, seat: Seat, member) -> None:
        """`member` left the seat."""
        seat.resident.pop(member, None)
        if seat.reclaim is not None and member in seat.reclaim:
            self._answered(seat, member)

    # -- the routing ---------------------------------------------------------------------------
    def _route(self, gpu, action) -> None:
        seat = action.client
        if not isinstance(seat, Seat):
            self._emit(gpu, action)  # a client of the arbiter that is no seat: as it is
        elif isinstance(action, Grant):
            seat.resident, seat.reclaim, seat.evicting, seat.refused = {}, None, False, False
            seat.evict_mib = 0
            self._seat_granted(seat, action)
        elif isinstance(action, Drop):
            self._seat_dropped(seat, action)
        elif isinstance(action, Overdue):
            for m in seat.holding:
                self._emit(gpu, Overdue(m, action.waited))
        elif isinstance(action, Backoff):
            for m in seat.members:
                self._emit(gpu, Backoff(m, action.waited, action.seconds))
        elif isinstance(action, Reclaim):
            asked = {m for m, nbytes in seat.resident.items() if nbytes and m in seat.members}
            if not asked:
                self._tell_resident(seat)   # nothing of it is on the GPU: answered at once
                return
            seat.reclaim, seat.refused = asked, False
            for m in seat.members:
                if m in asked:
                    self._emit(gpu, Reclaim(m))
        elif isinstance(action, Evict) and seat.reclaim is not None:
            for m in [m for m in seat.members if m in seat.reclaim]:
                self._emit(gpu, Evict(m, action.waited))   # silent after EVICT: connections close
                seat.resident.pop(m, None)
            seat.reclaim = None
        elif isinstance(action, Evict):
            seat.grant = None
            for m in list(seat.holding):  # their connections close; leave() comes later
                self._emit(gpu, Evict(m, action.waited))
            seat.holding.clear()
            self._reconsider(seat.job)
