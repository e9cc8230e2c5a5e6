"""Whole clients suspended to host and resumed: the scheduler as the driver's checkpoint controller.

A client is suspended in two steps. The scheduler sends SUSPEND; the client's library moves all of
its memory out and closes its gates, and answers SUSPEND_READY (or why it cannot be suspended:
managed memory, several GPUs, running). Then the checkpoint worker (checkpoint_worker.py, a
process of its own) locks and checkpoints it: the driver holds nothing of the process on the GPU
any more, its context included. The client is resumed when its application wants to run
(RESUME_REQ) or by `nvsharectl resume`: the worker restores and unlocks it (a restore that finds no
room is tried again), and RESUMED lets its application go; its memory comes back at its next grant.

Suspension is asked for by `nvsharectl suspend` or, with --suspend-idle SECONDS, for every client
idle that long. Only clients whose HELLO offers it are asked, only while idle on every GPU. The
scheduler restores every suspended client before it exits. A client whose scheduler died while it
was suspended asks the next one to resume it at once (RESUME_REQ after its WELCOME).

Suspender owns the worker; SuspendRecord is one connection's state (conn.suspend).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_SUSPEND, Resumed, Suspend, SuspendStatus, encode
from . import move

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .state import SchedulerState

log = logging.getLogger("nvshare.scheduler")

LOCK_TIMEOUT_MS = 10000   # how long a lock may wait for the client's driver calls in flight
RESUME_RETRY = (0.2, 5.0)  # a restore that found no room: first and longest wait before trying again

ON_A_GPU = "it holds or waits for a GPU"  # why_not's one passing reason (a move waits it out)
REFUSALS = {  # SUSPEND_READY's status, as status shows it
    SuspendStatus.MANAGED: "it holds managed memory, which the driver cannot checkpoint",
    SuspendStatus.SEVERAL_GPUS: "it uses more than one GPU",
    SuspendStatus.BUSY: "it was running",
    SuspendStatus.NOT_MOVED: "some of its memory could not leave the GPU",
    SuspendStatus.NO_SWAP: "its memory cannot be moved here (NVSHARE_SWAP=off, or a driver without pinned host memory)",
}


@dataclass
class SuspendRecord:
    """One client's suspension: phase None (running), "moving" (SUSPEND sent), "checkpointing",
    "suspended" or "resuming"."""
    phase: str | None = None
    since: float = 0.0
    refused: str | None = None         # why the last attempt did not suspend it
    ms: dict = field(default_factory=dict)  # the last suspend's and resume's phases
    suspends: int = 0
    resumes: int = 0
    resume_wanted: bool = False        # RESUME_REQ or nvsharectl resume came while checkpointing
    idle_since: float | None = None    # --suspend-idle: idle on every GPU since (monotonic)
    asked_unsuspended: bool = False    # RESUME_REQ came while not suspended here (see wake())
    move: move.MoveOrder | None = None  # nvsharectl move, under way (move.py)
    move_refused: str | None = None    # why the last order did not move it
    moves: int = 0
    last_move: dict | None = None      # the last move's GPUs and time
    resume_failed: str | None = None   # why the last resume gave up (a failure not worth retrying)

    def view(self, now: float) -> dict:
        return {"phase": self.phase, "for_seconds": round(now - self.since, 3) if self.phase else None,
                "refused": self.refused, "ms": dict(self.ms), "suspends": self.suspends,
                "resumes": self.resumes, "resume_failed": self.resume_failed}

    def move_view(self, now: float) -> dict:
        return {"under_way": self.move.view(now) if self.move else None, "refused": self.move_refused,
                "moves": self.moves, "last": self.last_move}


class Suspender:
    """The checkpoint worker: started at the first suspension, one request at a time."""

    def __init__(self, driver: str, enabled: bool = True):
        self.driver = driver
        # why suspension is off: --no-suspend, or the worker could not start
        self.why_not: str | None = None if enabled else "suspension is off (--no-suspend)"
        self.enabled = enabled
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def _worker(self) -> asyncio.subprocess.Process | None:
        if not self.enabled:
            return None
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        # Without CUDA_VISIBLE_DEVICES: a move's mapping names every GPU the kernel driver has,
        # and the worker learns them from its own driver (checkpoint_worker.full_mapping).
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "xpushare.scheduler.node.checkpoint_worker", self.driver,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
        hello = json.loads(await self._proc.stdout.readline() or b'{"ready": false, "why": "it exited"}')
        if not hello.get("ready"):
            self.why_not = f"the checkpoint worker cannot run: {hello.get('why')}"
            log.warning("suspend: %s", self.why_not)
            self._proc = None
            return None
        self.why_not = None
        return self._proc

    async def call(self, op: str, pid: int, **extra) -> dict:
        """One request to the worker (extra: its other fields, such as a resume's GPU pairs)."""
        async with self._lock:
            proc = await self._worker()
            if proc is None:
                return {"ok": False, "error": self.why_not, "retry": False}
            request = {"op": op, "pid": pid, "timeout_ms": LOCK_TIMEOUT_MS, **extra}
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            await proc.stdin.drain()
            line = await proc.stdout.readline()
            if not line:
                self._proc = None
                return {"ok": False, "error": "the checkpoint worker exited", "retry": True}
            return json.loads(line)

    async def close(self) -> None:
        self.enabled, self.why_not = False, "the scheduler is stopping"  # no worker starts again
        if self._proc is not None and self._proc.returncode is None:
            self._proc.stdin.close()
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except asyncio.TimeoutError:
                self._proc.kill()


# ------------------------------------------------------------------------------------------------
# the flow (the message handlers, control operations and the idle timer call these)

def why_not(state: SchedulerState, conn: Conn) -> str | None:
    """Why conn cannot be asked to suspend now, or None."""
    if conn.hello is None or not conn.hello.flags & HELLO_SUSPEND:
        return "its library cannot be suspended (an older one)"
    if conn.suspend.phase is not None:
        return f"it is {conn.suspend.phase} already"
    if state.suspender.why_not:
        return state.suspender.why_not
    gangs = state.registry.gangs
    if any(gangs.state_of(conn, g) != "idle" for g in conn.gpus()):
        return ON_A_GPU
    return None


def ask(state: SchedulerState, conn: Conn, who: str, flags: int = 0) -> str | None:
    """Send SUSPEND to conn (who: what asked, for the log; flags: SUSPEND_MOVE for move.py); the
    reason it was not asked, or None."""
    reason = why_not(state, conn)
    if reason:
        return reason
    rec = conn.suspend
    rec.phase, rec.since, rec.refused, rec.resume_wanted = "moving", time.monotonic(), None, False
    conn.send(encode(Suspend(flags)))
    log.info("suspend pid=%d client=%d (%s): moving its memory out", conn.pid, conn.id, who)
    return None


def on_ready(state: SchedulerState, conn: Conn, status: int) -> None:
    rec = conn.suspend
    if rec.phase != "moving":
        return  # not asked (or asked on an earlier connection): nothing to do
    if status != SuspendStatus.READY:
        rec.phase = None
        rec.refused = REFUSALS.get(status, f"status {status}")
        log.info("suspend pid=%d client=%d refused: %s", conn.pid, conn.id, rec.refused)
        move.refused(state, conn, "busy" if status == SuspendStatus.BUSY else rec.refused)
        return
    rec.phase = "checkpointing"
    asyncio.get_running_loop().create_task(_checkpoint(state, conn))


async def _checkpoint(state: SchedulerState, conn: Conn) -> None:
    rec = conn.suspend
    answer = await state.suspender.call("suspend", conn.pid)
    rec.ms = dict(answer.get("ms") or {})
    if conn.closed or not answer.get("ok"):
        rec.phase, rec.refused = None, answer.get("error") or "the client went away"
        log.warning("suspend pid=%d client=%d failed: %s; it runs on", conn.pid, conn.id, rec.refused)
        if not conn.closed:
            conn.send(encode(Resumed()))
        move.give_up(state, conn, f"it could not be checkpointed: {rec.refused}")
        return
    rec.phase, rec.since = "suspended", time.monotonic()
    rec.suspends += 1
    log.info("suspended pid=%d client=%d: lock %.1f ms, checkpoint %.1f ms", conn.pid, conn.id,
             rec.ms.get("lock", 0), rec.ms.get("checkpoint", 0))
    if rec.resume_wanted and rec.move is None:  # under an order, move.py restores it
        await _resume(state, conn)


def wake(state: SchedulerState, conn: Conn, who: str) -> str | None:
    """Resume conn (its RESUME_REQ, or nvsharectl resume): the reason nothing is done, or None."""
    rec = conn.suspend
    if rec.move is not None:
        return None  # restored by the move, onto its new GPU or, failing that, where it was
    if rec.phase in ("checkpointing", "moving"):
        rec.resume_wanted = True  # after the checkpoint (the library answers BUSY while moving)
        return None
    if rec.phase == "resuming":
        return None
    if rec.phase is None and (who != "its application" or rec.asked_unsuspended):
        return "it is not suspended"
    # A client that says it is suspended while this scheduler never suspended it was suspended by
    # the one before (which died): it is restored once, whatever it says afterwards.
    rec.asked_unsuspended = rec.asked_unsuspended or rec.phase is None
    log.info("resume pid=%d client=%d (%s)", conn.pid, conn.id, who)
    # "resuming" now, not when the task first runs: a second wake in this loop turn (a RESUME_REQ
    # and an nvsharectl resume together) would start a second restore, whose RESUMED could come
    # after the client's next suspension began
    was_suspended = rec.phase == "suspended"
    rec.phase, rec.since = "resuming", time.monotonic()
    asyncio.get_running_loop().create_task(_resume(state, conn, was_suspended=was_suspended))
    return None


async def _resume(state: SchedulerState, conn: Conn, first: dict | None = None,
                  was_suspended: bool | None = None) -> None:
    """Restore and unlock; a restore that found no room is tried again (never left stuck), one
    the worker says is not worth trying again (retry false: suspension off here, a driver error)
    is given up, said in status and the log, and tried again at the next resume asked for.
    first: the answer of a try already made (resume_moved's); one that moved the process makes
    the RESUMED say so, however many tries the unlock takes."""
    rec = conn.suspend
    if was_suspended is None:
        was_suspended = rec.phase in ("suspended", "resuming")
    if rec.phase != "resuming":
        rec.phase, rec.since = "resuming", time.monotonic()
    wait = RESUME_RETRY[0]
    rec.resume_failed = None
    answer, moved = first, bool(first and first.get("moved"))
    while not conn.closed:
        if answer is not None and answer.get("ok"):
            rec.ms.update(answer.get("ms") or {})
            break
        if answer is not None and answer.get("retry") is False:
            rec.resume_failed = str(answer.get("error"))
            rec.phase, rec.since = "suspended", time.monotonic()
            log.error("resume pid=%d client=%d failed: %s; not tried again until a resume is asked "
                      "for (nvsharectl resume)", conn.pid, conn.id, rec.resume_failed)
            return
        if answer is not None:
            log.warning("resume pid=%d client=%d: %s; trying again in %.1f s", conn.pid, conn.id,
                        answer.get("error"), wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, RESUME_RETRY[1])
        answer = await state.suspender.call("resume", conn.pid)
    rec.phase, rec.resume_wanted = None, False
    rec.resumes += was_suspended
    if conn.closed:  # gone meanwhile: forget() ended its order
        log.info("resume pid=%d client=%d: it went away before its restore ended", conn.pid, conn.id)
        return
    conn.send(move.finished(conn) if moved and rec.move is not None else encode(Resumed()))
    log.info("resumed pid=%d client=%d: restore %.1f ms, unlock %.1f ms", conn.pid, conn.id,
             rec.ms.get("restore", 0), rec.ms.get("unlock", 0))


async def resume_moved(state: SchedulerState, conn: Conn) -> None:
    """Restore a client under an order onto its target (move.py). A restore there that fails
    restores it where it was, as any resume (never left checkpointed), and what it asked
    meanwhile goes to the policy then."""
    conn.suspend.phase, conn.suspend.since = "resuming", time.monotonic()
    answer = await state.suspender.call("resume", conn.pid, pairs=move.pairs(conn))
    if answer.get("ok") or answer.get("moved"):  # moved: only its unlock is left to try again
        await _resume(state, conn, answer)
        return
    mv = move.give_up(state, conn, f"the restore there failed: {answer.get('error')}", running=False)
    await _resume(state, conn)
    move.replay(state, conn, mv)


def idle_round(state: SchedulerState, after: float, now: float) -> None:
    """--suspend-idle: ask every client idle on all its GPUs for `after` seconds."""
    gangs = state.registry.gangs
    for conn in list(state.clients()):
        rec = conn.suspend
        idle = rec.phase is None and conn.gpus() and all(gangs.state_of(conn, g) == "idle"
                                                        for g in conn.gpus())
        if not idle:
            rec.idle_since = None
            continue
        if rec.idle_since is None:
            rec.idle_since = now
        elif now - rec.idle_since >= after:
            rec.idle_since = now  # a refusal is asked again only after as long again
            ask(state, conn, f"idle {after:g} s")


async def resume_all(state: SchedulerState, timeout: float = 20.0) -> None:
    """Before the scheduler exits: no client is left checkpointed (bounded by `timeout`). A move
    not yet suspending its client ends; one past that goes on to its restore."""
    for conn in list(state.clients()):
        if conn.suspend.move is not None and conn.suspend.phase is None:
            move.give_up(state, conn, "the scheduler stops", running=False)
    for conn in list(state.clients()):
        if conn.suspend.phase:
            wake(state, conn, "the scheduler stops")
    deadline = time.monotonic() + timeout
    while any(c.suspend.phase for c in state.clients()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
