"""What each mode does: one Strategy class per mode (STRATEGIES), each a set of decisions taken on an
Arbiter at every event. The rules they share (draining, expiry, grants and drops) are the arbiter's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.protocol import DropReason
from .model import AGING_QUANTA, MAX_SKIP, Action, Client, Mode
from .residency import COVERED, FITS, SHORT, make_room, room_drops

if TYPE_CHECKING:
    from .arbiter import Arbiter


def _operation(arb: Arbiter) -> str:
    """idle: nobody holds; concurrent: several run at once; serialised: one runs (or the GPU is
    changing hands) while others wait their turn; exclusive: one runs and nobody waits."""
    if not arb.holders:
        return "idle"
    if len(arb._held.live) > 1:
        return "concurrent"
    return "serialised" if arb.waiting else "exclusive"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


class Strategy:
    """What a mode does. step() makes the decisions; it mutates the arbiter and returns actions."""
    mode: Mode

    def step(self, arb: Arbiter, now: float) -> list[Action]:
        raise NotImplementedError

    def enter(self, arb: Arbiter, now: float) -> list[Action]:
        """The arbiter has just switched to this mode (holders and waiters as the old mode left
        them)."""
        return []

    def retune(self, arb: Arbiter, now: float) -> list[Action]:
        """The quantum was set: a fresh quantum of the new length (scaled by the holder's share,
        Arbiter.quantum_of), counted from the change. A holder that has already had its quantum
        (expired) or is draining keeps that state."""
        for client, h in arb.holders.items():
            if h.drop_sent is None and not h.expired:
                arb._start_quantum(client, now)
        return []

    def describe(self, arb: Arbiter, now: float) -> tuple[str, str]:
        """(operation, why) for Arbiter.describe."""
        raise NotImplementedError

    def quantum(self, arb: Arbiter, client: Client) -> float:
        """The quantum this mode grants `client` with (0: none): tq scaled by the client's share
        over the contenders' mean share (Arbiter.quantum_of)."""
        return arb.quantum_of(client)


class SerialStrategy(Strategy):
    """One holder at a time, for a quantum of `arb.tq` seconds scaled by its compute share
    (Arbiter.quantum_of: tq * share / mean share of the holders and waiters), waiters in priority
    order. Shares order nothing: with unequal shares the clients taking turns get GPU time in
    proportion to them.

    The next waiter preempts the holder at once when its base priority is higher than the holder's
    rank. At expiry the holder is asked to drop (reason QUANTUM) if the next waiter's effective
    priority is at least the holder's base priority; if a waiter of lower priority waits, it is
    looked at again a quantum later (aging catches up). If nobody waits it keeps the GPU, marked
    expired, with no timer: the first request that arrives after that drops it at once. The drop
    carries EVICT only when the capacity is known and the two do not fit together. The next waiter
    is granted when the GPU is free, and fits beside the bytes idle clients keep on the GPU; room
    for it comes from those first (residency.make_room, asked for once no holder runs): it is not
    granted while reclaims it needs are in flight, and runs alone once none is left to ask.

    Cost: the next waiter is the head of the queue, O(P + r log r) (queue.py), and one holder runs
    at a time; expiries and overdue drops come from the deadline heap.
    """
    mode = Mode.SERIAL

    def step(self, arb, now):
        actions = arb._expire(now)
        head = arb._head(now)
        if head is not None:
            for client in list(arb._held.live):
                h = arb.holders[client]
                if h.expired and arb.effective_priority(head, now) >= arb.priority(client):
                    reason = DropReason.QUANTUM
                elif arb.priority(head) > arb.rank(client):
                    reason = DropReason.PREEMPTED
                else:
                    continue
                actions += room_drops(arb, [(client, reason)], now, self._budget(arb),
                                      arb.need(head))
        reclaims, room = make_room(arb, None if arb._held.live else head, arb._live_used(), now)
        actions += reclaims
        if (not arb.holders and head is not None and not arb.is_reclaiming(head)
                and (room == FITS or (room == SHORT and arb._res.settled()))):
            actions.append(arb._grant(head, now, self.quantum(arb, head)))
        arb._rearm_expired(head, now)
        return actions

    @staticmethod
    def _budget(arb: Arbiter) -> int | None:
        return arb._res.budget_after_reclaims(arb.budget)

    def enter(self, arb, now):
        # Keep the first holder (with a fresh quantum); ask the others to give the GPU up. They stay
        # holders until they release; after that they queue again with their next request.
        actions: list[Action] = []
        kept = None
        for client, h in arb.holders.items():
            if h.drop_sent is not None:  # already draining: look at it again in a quantum
                arb._arm(client, now + arb.tq)
            elif kept is None:
                kept = client
                arb._set_expired(client, False)
                arb._start_quantum(client, now)
            else:
                actions += room_drops(arb, [(client, DropReason.ADMIN)], now, self._budget(arb),
                                      arb.need(kept))
        return actions

    def describe(self, arb, now):
        if not arb.holders:
            return "idle", "serial mode: nobody holds the GPU"
        waiting = f"{len(arb.waiting)} waiting" if arb.waiting else "nobody waiting"
        return _operation(arb), f"serial mode: one client at a time, {waiting}"


class AutoStrategy(Strategy):
    """Memory-aware: run together the waiters that fit, serialise the others.

    Compute shares. Clients running together do not split the GPU's time by any weight (the
    hardware shares out its SMs as it likes), so clients of unequal shares take turns, even when
    their memory fits together: a waiter is not granted beside a running (non-draining) holder whose
    share differs from its own, and waits as a waiter that does not fit would, served by the
    quantum. Clients of equal shares run together as they always did. Each grant's quantum is
    scaled by the client's share (Arbiter.quantum_of), so that turns split the time in proportion
    to the shares; priorities keep their meaning (a share orders nobody).

    Each step, in order:
    1. Draining holders silent too long are reported Overdue, then evicted.
    2. Growth: when the non-draining holders no longer fit in the budget, the lowest-ranked (then
       newest) are dropped (MEMORY, EVICT) until the rest fit; the highest-ranked, oldest holder is
       always kept. Then, should the running holders have unequal shares (a share was set, or the
       mode changed), those whose share differs from the highest-ranked, oldest one's are dropped
       (ADMIN, no EVICT: they fit).
    3. Admission: waiters in priority order are granted while they fit beside the holders (draining
       ones included) and those granted before them, and have the share of the running holders and
       of those granted before them. A waiter that does not fit is blocked; each later waiter
       granted past it counts a skip, and once it has MAX_SKIP skips, or holders were dropped to
       make room for it, nobody behind it is granted until it has run. A waiter blocked by its
       share is at once such a barrier (later waiters of the holders' share would prolong their
       run). Nor is a waiter granted past a blocked one that could preempt it. With no holder at
       all, the first waiter is granted even when it does not fit (it runs alone), once no idle
       client is being, or could be, reclaimed. Fitting counts the bytes idle clients keep on the
       GPU (Arbiter.admit_budget, need); a waiter being reclaimed is not granted before it answers.
    4. Making room for the first blocked waiter (or for running holders past the budget beside
       idle clients' bytes), from idle clients first (residency.make_room). While those reclaims
       would make it fit, nothing else is done; otherwise, when running holders have another share:
       all of those must go, and they are dropped once every one of them may be (its quantum
       expired and the waiter's effective priority reaches its base priority: QUANTUM; or ranked
       below the waiter's base priority: PREEMPTED), with EVICT only when the waiter does not fit
       beside the running holders. Otherwise: holders whose quantum expired and whose base
       priority its effective priority reaches (QUANTUM, oldest grant first), then holders ranked
       below its base priority (PREEMPTED, lowest rank then newest first), are dropped with EVICT
       (each moving only what the waiter needs: residency.room_drops), as few as make it fit
       once they (and holders already draining, and idle clients' bytes
       that may be reclaimed) are gone. When even all of them would not, nobody is dropped yet.
    5. Expired holders not dropped get no timer, unless the first blocked waiter waits for aging
       to reach their priority: then they are looked at again a quantum later.

    Cost: step 1 from the deadline heap, O(d log h); steps 2 and 4 from running sums (the running
    holders' distinct shares are counted as they change: HolderIndex.live_shares), reading the
    running holders only when they must drop some or a waiter of another share waits; step 3 as
    _admit says (a waiter blocked by its share ends the walk); step 5 reads the expired holders
    only while a waiter is blocked (else only those that still have a timer).
    """
    mode = Mode.AUTO

    def step(self, arb, now):
        actions = arb._expire(now)
        actions += self._fit_holders(arb, now)
        actions += self._split_shares(arb, now)
        grants, head = self._admit(arb, now)
        actions += grants
        reclaims, room = make_room(arb, head, arb._live_used(), now)
        actions += reclaims
        if head is not None and room != COVERED:   # idle clients' bytes count as gone
            actions += self._make_room(arb, head, now, arb._res.budget_after_reclaims(arb.budget))
        arb._rearm_expired(head, now)
        return actions

    @staticmethod
    def _fit_holders(arb: Arbiter, now: float) -> list[Action]:
        budget = arb.budget
        if budget is None or len(arb._held.live) <= 1:
            return []
        total = arb._live_used()
        if total <= budget:
            return []
        actions: list[Action] = []
        victims = sorted(arb._held.live, key=lambda c: (arb.rank(c), -arb.holders[c].seq))[:-1]
        for client in victims:
            actions.append(arb._drop(client, now, DropReason.MEMORY, evict=True))
            total -= arb.footprint(client)
            if total <= budget:
                break
        return actions

    @staticmethod
    def _split_shares(arb: Arbiter, now: float) -> list[Action]:
        """Running holders of unequal shares (after set_share or a change of mode): keep those of
        the highest-ranked, oldest holder's share, drop the others (ADMIN)."""
        if len(arb._held.live_shares) <= 1:
            return []
        live = arb._held.live
        keep = max(live, key=lambda c: (arb.rank(c), -arb.holders[c].seq))
        share = arb.share(keep)
        return [arb._drop(c, now, DropReason.ADMIN) for c in list(live) if arb.share(c) != share]

    @staticmethod
    def _admit(arb: Arbiter, now: float) -> tuple[list[Action], Client | None]:
        """Admission (step 3): the grants, and the first blocked waiter (None if none is left).

        The waiters are read lazily in serving order, and the walk stops as soon as nobody further
        can be granted: at a barrier, at a waiter outranked by a blocked one (all further ones are:
        their effective priority is no higher), or when no waiter left that is not outranked could
        fit in the room left (WaitQueue.any_fits). So it reads the waiters it grants and those it
        passes that do not fit while one further does fit; each of those gains a skip, and after
        MAX_SKIP of them is a barrier. Skips are added once, at the end (a waiter blocked before g
        of the pass's grants gains g).
        """
        budget, settled, reclaiming = arb.admit_budget, arb._res.settled(), arb._res.reclaiming
        used, held = arb._used(), bool(arb.holders)
        granted: list[Client] = []
        blocked: list[tuple[Client, int]] = []   # (waiter, grants before it was blocked)
        max_base: int | None = None              # the highest base priority blocked
        stopped, tops = None, None
        # The one share the running holders (and those granted here) have; None: nobody runs.
        live_shares = arb._held.live_shares
        running = next(iter(live_shares)) if len(live_shares) == 1 else None
        for neg_eff, _, client in arb._ordered(now):
            holding = held or bool(granted)
            alone = not holding and settled
            if max_base is not None and max_base > -neg_eff:
                stopped = client
                break
            if not alone and budget is not None:
                tops = tops or arb._queue.top_priorities(now, AGING_QUANTA * arb.tq)
                if not arb._queue.any_fits(budget - used - arb.client_overhead, max_base, tops,
                                           now, AGING_QUANTA * arb.tq):
                    stopped = client
                    break
            need, share = arb.need(client), arb.share(client)
            other_share = running is not None and share != running
            if client not in reclaiming and (
                    alone or (not other_share and (budget is None or used + need <= budget))):
                granted.append(client)
                arb._queue.hide(client)
                used += need
                running = share
                continue
            blocked.append((client, len(granted)))
            base = arb.priority(client)
            max_base = base if max_base is None else max(max_base, base)
            w = arb.waiting[client]
            if other_share or w.reserved or w.skips >= MAX_SKIP:   # a barrier: nobody behind it
                break                                              # is granted
        for client, before in blocked:
            arb.waiting[client].skips += len(granted) - before
        head = blocked[0][0] if blocked else stopped
        return [arb._grant(c, now, arb.strategy.quantum(arb, c)) for c in granted], head

    @staticmethod
    def _make_room(arb: Arbiter, head: Client, now: float, budget: int | None) -> list[Action]:
        share, live_shares = arb.share(head), arb._held.live_shares
        if live_shares and (len(live_shares) > 1 or share not in live_shares):
            return AutoStrategy._take_turns(arb, head, now, budget)
        if budget is None:
            return []
        need, live = arb.need(head), arb._held.live
        left, used = len(live), arb._live_used()   # what stays once the planned drops are gone
        if not left or used + need <= budget:
            return []  # room comes when the draining holders release (they count as gone)
        eff, base = arb.effective_priority(head, now), arb.priority(head)
        expired = [c for c in live if arb.holders[c].expired and eff >= arb.priority(c)]
        preemptable = sorted((c for c in live if c not in expired and base > arb.rank(c)),
                             key=lambda c: (arb.rank(c), -arb.holders[c].seq))
        plan = []
        for client, reason in ([(c, DropReason.QUANTUM) for c in expired]
                               + [(c, DropReason.PREEMPTED) for c in preemptable]):
            left, used = left - 1, used - arb.footprint(client)
            plan.append((client, reason))
            if not left or used + need <= budget:
                arb.waiting[head].reserved = True
                return room_drops(arb, plan, now, budget, used + need)
        return []

    @staticmethod
    def _take_turns(arb: Arbiter, head: Client, now: float, budget: int | None) -> list[Action]:
        """Step 4 for a waiter whose share differs from running holders': all of those are dropped
        once each of them may be, or none is."""
        share = arb.share(head)
        eff, base = arb.effective_priority(head, now), arb.priority(head)
        plan = []
        for client in arb._held.live:
            if arb.share(client) == share:
                continue
            if arb.holders[client].expired and eff >= arb.priority(client):
                plan.append((client, DropReason.QUANTUM))
            elif base > arb.rank(client):
                plan.append((client, DropReason.PREEMPTED))
            else:
                return []   # one of them still has its turn: nobody drops yet
        arb.waiting[head].reserved = True
        stays = arb._live_used() - arb.footprints(c for c, _ in plan)
        return room_drops(arb, plan, now, budget, stays + arb.need(head))

    def enter(self, arb, now):
        # Holders keep running. Those granted without a quantum (mode off) get one from now, and
        # draining ones a deadline to be reported overdue or evicted.
        for client, h in arb.holders.items():
            if h.deadline is None and h.drop_sent is not None:
                arb._arm(client, now + arb.tq)
            elif h.deadline is None and not h.expired:
                arb._start_quantum(client, now)
        return []

    def describe(self, arb, now):
        budget, used = arb.budget, arb._used()
        if not arb.holders:
            return "idle", "auto mode: nobody holds the GPU"
        if budget is None:
            if arb.waiting and self._other_share(arb, arb._head(now)):
                return _operation(arb), ("auto mode: capacity unknown; clients of unequal shares "
                                         "take turns, the others run at once")
            return _operation(arb), "auto mode: capacity unknown, every request runs at once"
        live = len(arb._held.live)
        if live > 1:
            why = f"auto mode: {live} clients fit together ({_gib(used)} of {_gib(budget)})"
        elif used > budget:
            why = f"auto mode: one client runs alone; {_gib(used)} do not fit in {_gib(budget)}"
        else:
            why = f"auto mode: one client runs; it fits ({_gib(used)} of {_gib(budget)})"
        if arb.waiting:
            head = arb._head(now)
            why += f"; {len(arb.waiting)} waiting: the next " + (
                f"has share {arb.share(head):g}, unlike the running clients: they take turns"
                if self._other_share(arb, head) else
                f"needs {_gib(arb.need(head))}, which does not fit in the "
                f"{_gib(max(0, arb.admit_budget - used))} left")
        return _operation(arb), why


    @staticmethod
    def _other_share(arb: Arbiter, client: Client) -> bool:
        """Whether a running holder has another share than `client`."""
        live_shares = arb._held.live_shares
        return bool(live_shares) and (len(live_shares) > 1 or arb.share(client) not in live_shares)


class OffStrategy(Strategy):
    """Everyone runs at once: every request is granted immediately with no quantum.

    Priorities, footprints and compute shares are ignored (with no quanta there is no time to split
    here: holding a client to its share of the GPU in this mode is the library gate's business);
    draining holders are never evicted. Cost: O(g) for the g waiters granted (only a change of
    mode leaves any), and holders have no deadlines.
    """
    mode = Mode.OFF

    def step(self, arb, now):
        return [arb._grant(c, now, 0.0) for c in list(arb.waiting)]

    def enter(self, arb, now):
        for client in arb.holders:
            # no quanta, and no Overdue reports or evictions for holders still draining
            arb._arm(client, None)
            arb._set_expired(client, False)
        return []

    def retune(self, arb, now):
        return []

    def quantum(self, arb, client):
        return 0.0

    def describe(self, arb, now):
        return _operation(arb), "mode off: every request runs at once, with no quantum"


STRATEGIES: dict[Mode, type[Strategy]] = {
    Mode.AUTO: AutoStrategy, Mode.SERIAL: SerialStrategy, Mode.OFF: OffStrategy,
}

