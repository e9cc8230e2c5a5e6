"""Moving a client to another GPU of the node: suspended whole (suspend.py), then restored by the
driver onto the other GPU (the checkpoint API's GPU pairs: old UUID -> new UUID, same chip type).

The steps, one order per client (MoveOrder, in conn.suspend.move):
1. It lets go of the GPU. A holder is sent DROP_LOCK (reason MOVE, with its memory out); from
   the order on, every REQ_LOCK it sends for that GPU is held back from the policy, so it is not
   granted there again. A client waiting in the queue is dropped once granted.
2. Not holding, it is asked to SUSPEND with SUSPEND_MOVE: its library accepts a request of its
   own still outstanding, moves all of its memory out and closes its gates. It answers BUSY while
   work is in flight: it is asked again (MOVE_POLL_S) until MOVE_TIMEOUT_S.
3. The checkpoint worker locks and checkpoints it, then restores it with the pair and unlocks it.
   RESUMED_MOVED tells the library: under the same ordinal its GPU is now the other one. It reads
   the device's identity again, ATTACHes it (on_attach moves it between the GPUs' arbiters) and
   requests the lock there; its memory comes back at that grant, on the new GPU.
A restore onto the other GPU that fails restores it where it was (RESUMED without the flag, and
the held-back request goes to the policy): a move never leaves a process checkpointed. Every
refusal is said, in the answer to `nvsharectl move` or in status (the client's `move`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...wire.protocol import (
    DROP_EVICT, HELLO_MOVE, RESUMED_MOVED, SUSPEND_MOVE, DropLock, DropReason, Resumed, encode,
)
from ...wire.scheduling import CONTEXT_RESERVE
from . import metrics, swap

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

log = logging.getLogger("nvshare.scheduler")

MOVE_POLL_S = 0.05     # how often an order looks again whether its client let go of the GPU
MOVE_TIMEOUT_S = 30.0  # an order whose client never lets go (or stays busy) is given up after this
MIB = 1 << 20


@dataclass
class MoveOrder:
    source: Gpu
    target: Gpu
    who: str                     # what asked, for the log
    since: float                 # monotonic
    dropped: bool = False        # DROP_LOCK(MOVE) sent
    held_request: bool = False   # a REQ_LOCK held back from the policy
    step: str = "releasing"      # releasing, suspending, restoring

    def view(self, now: float) -> dict:
        return {"from": self.source.uuid, "to": self.target.uuid, "step": self.step,
                "for_seconds": round(now - self.since, 3)}


def room_needed(conn: Conn, gpu: Gpu) -> int:
    """What conn takes on a GPU: its memory on gpu and its context."""
    return swap.footprint(conn, gpu) + CONTEXT_RESERVE


def why_not(state: SchedulerState, conn: Conn, target: Gpu) -> str | None:
    """Why conn cannot be moved to target, or None."""
    if conn.hello is None or not conn.hello.flags & HELLO_MOVE:
        return "its library cannot be moved (an older one)"
    if state.suspender.why_not:
        return state.suspender.why_not
    rec = conn.suspend
    if rec.move is not None:
        return f"it is being moved already (to GPU {rec.move.target.label})"
    if rec.phase is not None and rec.phase != "suspended":
        return f"it is {rec.phase}"
    gpus = conn.gpus()
    if len(gpus) != 1:
        return "it uses more than one GPU" if gpus else "it uses no GPU yet"
    source = next(iter(gpus))
    if source is target:
        return f"it is on GPU {target.label} already"
    job = state.registry.gangs.job_of.get(conn)
    if job is not None and len(job.members) > 1:
        return f"it is one of the {len(job.members)} processes of job {job.label}, which move together"
    if any(g.uuid.upper().startswith("MIG-") for g in (source, target)):
        return "the driver's checkpoint does not support MIG devices"
    if not source.name or source.name != target.name:
        return (f"the chip types differ (GPU {source.label} is {source.name or 'unknown'}, "
                f"GPU {target.label} is {target.name or 'unknown'}); the driver restores a process "
                "only onto the same type")
    need = room_needed(conn, source)
    if target.capacity and need > target.capacity:
        return (f"GPU {target.label} holds {target.capacity // MIB} MiB; the client needs "
                f"{need // MIB} MiB with its context")
    return None


def order(state: SchedulerState, conn: Conn, target: Gpu, who: str) -> str | None:
    """Move conn to target (nvsharectl move): the reason it is not moved, or None (it goes on in
    the background; status shows its step)."""
    reason = why_not(state, conn, target)
    if reason:
        return reason
    source = next(iter(conn.gpus()))
    conn.suspend.move = MoveOrder(source, target, who, time.monotonic())
    conn.suspend.move_refused = None
    log.info("move pid=%d client=%d (%s): %s -> %s", conn.pid, conn.id, who, source.label, target.label)
    asyncio.get_running_loop().create_task(_drive(state, conn))
    return None


def holds_back(conn: Conn, gpu: Gpu) -> bool:
    """A REQ_LOCK of conn for gpu is held back from the policy (an order moves it off gpu)."""
    mv = conn.suspend.move
    if mv is None or gpu is not mv.source:
        return False
    mv.held_request = True
    return True


async def _drive(state: SchedulerState, conn: Conn) -> None:
    """Steps 1-2 of the top of the file, looked at every MOVE_POLL_S; suspend.py takes it from the
    checkpoint on (resume_moved, then finished)."""
    from . import suspend  # suspend.py calls back into this module
    mv = conn.suspend.move
    gangs = state.registry.gangs
    while not conn.closed and conn.suspend.move is mv and mv.step != "restoring":
        rec = conn.suspend
        if rec.phase is None and time.monotonic() - mv.since > MOVE_TIMEOUT_S:  # once suspending,
            # the suspension's own steps bound it (a large process may take its time to leave)
            give_up(state, conn, f"it did not let go of GPU {mv.source.label} within {MOVE_TIMEOUT_S:g} s")
            return
        if rec.phase == "suspended":  # suspended before the order, or by its step 2
            mv.step = "restoring"
            await suspend.resume_moved(state, conn)
            return
        where = gangs.state_of(conn, mv.source)
        if where == "holding" and not mv.dropped:
            mv.dropped = True
            conn.send(encode(DropLock(conn.ordinal(mv.source), int(DropReason.MOVE), DROP_EVICT, 0)))
            metrics.dropped(conn, mv.source, DropReason.MOVE, True, state.registry.now())
            log.info("move pid=%d: drop gpu=%s so that it can be suspended", conn.pid, mv.source.label)
        elif where != "holding" and rec.phase is None:
            reason = suspend.ask(state, conn, f"a move to GPU {mv.target.label}", flags=SUSPEND_MOVE)
            if reason is None:
                mv.step = "suspending"
            elif reason != suspend.ON_A_GPU:  # waiting in the queue: dropped once granted
                give_up(state, conn, reason)
                return
        await asyncio.sleep(MOVE_POLL_S)


def pairs(conn: Conn) -> list[list[str]]:
    mv = conn.suspend.move
    return [[mv.source.uuid, mv.target.uuid]]


def refused(state: SchedulerState, conn: Conn, why: str) -> bool:
    """SUSPEND_READY refused the suspension of a client under an order. BUSY (work in flight) is
    asked again; anything else ends the order. Returns whether an order took the answer."""
    mv = conn.suspend.move
    if mv is None:
        return False
    if why == "busy":
        mv.step = "releasing"  # _drive asks again
        return True
    give_up(state, conn, why)
    return True


def give_up(state: SchedulerState, conn: Conn, why: str, running: bool = True) -> MoveOrder | None:
    """The order ends without a move. A request held back goes to the policy now if the client
    runs (`running`); else the caller passes it on (replay) once the client was restored."""
    mv = conn.suspend.move
    if mv is None:
        return None
    conn.suspend.move, conn.suspend.move_refused = None, f"to GPU {mv.target.label}: {why}"
    log.warning("move pid=%d client=%d to gpu=%s given up: %s", conn.pid, conn.id, mv.target.label, why)
    if running:
        replay(state, conn, mv)
    return mv


def replay(state: SchedulerState, conn: Conn, mv: MoveOrder) -> None:
    """The request an order held back, to the policy (the client stays on mv.source)."""
    if mv.held_request and not conn.closed and mv.source in conn.gpus():
        mv.held_request = False
        state.registry.request(conn, mv.source)


def finished(conn: Conn) -> bytes:
    """The client under an order was restored onto its target: the RESUMED that tells it so. The
    request held back is dropped: the library asks again once it attached the new GPU."""
    rec = conn.suspend
    mv, rec.move = rec.move, None
    rec.moves += 1
    rec.last_move = {"from": mv.source.uuid, "to": mv.target.uuid,
                     "seconds": round(time.monotonic() - mv.since, 3)}
    log.info("moved pid=%d client=%d gpu=%s -> gpu=%s in %.2f s", conn.pid, conn.id, mv.source.label,
             mv.target.label, rec.last_move["seconds"])
    return encode(Resumed(RESUMED_MOVED))
