"""Swapping, the shell's side: where each client's memory on each GPU is, as it reports it
(RESIDENCY), the EVICTs sent to idle clients for room, and what status and the exporter show of it.

The policy decides (policy/: which idle client gives room, what counts against the capacity); this
module keeps what the clients said, per connection and GPU (Conn.swap, a SwapRecord by GPU UUID),
and turns it into the policy's events (registry.residency) and into status and metrics fields.

Everything a client sends is untrusted: its byte counts are u64s of its own making, so what status
and the exporter show of them is cut to what it allocated: its resident bytes to the footprint it
reported (MEM_UPDATE), its swapped bytes to that footprint less what it says stays on the GPU, and
both, like any sum of swapped bytes, to HOST_MEMORY, where swapped memory lives (a footprint is two
u64s of the client's own: a few clients could otherwise add up to exabytes). A move's time is cut
to SWITCH_REPORT_MAX (60 s), like LOCK_RELEASED's.

Which move a report ends: an answer to EVICT (flag ANSWER) is a swap-out; a report from a client
that holds the lock and was not told to drop it is the swap-in at its grant; any other (a drop's
eviction, before LOCK_RELEASED or after it with NVSHARE_EVICT=background) is a swap-out.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ...wire.protocol import RESIDENCY_ANSWER, RESIDENCY_REFUSED, Residency
from ..policy import SWITCH_REPORT_MAX

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

lock_log = logging.getLogger("nvshare.scheduler.locks")  # --log-locks: a line per report

GiB = 1 << 30


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):   # not known here: no bound beyond the wire's u64
        return (1 << 64) - 1


HOST_MEMORY = _host_memory()  # bytes: no client's swapped memory, nor all of it, can be more


class SwapRecord:
    """What one client reported of its memory on one GPU, and the EVICT it was sent."""

    __slots__ = ("resident", "host", "moved_out", "refused", "at", "swap_out", "swap_in",
                 "evict_sent", "reclaims")

    def __init__(self):
        self.resident = 0          # resident_bytes of its last RESIDENCY (as sent: a u64)
        self.host = 0              # host_bytes of it
        self.moved_out = False     # a swap-out was reported since its last grant: `resident` counts
        self.refused = False       # its last swap-out left memory that could not move (REFUSED)
        self.at: float | None = None        # when the last RESIDENCY came
        self.swap_out: float | None = None  # seconds of its last swap-out (cut to 60 s)
        self.swap_in: float | None = None   # seconds of its last swap-in
        self.evict_sent: float | None = None  # when EVICT was sent; None once answered
        self.reclaims = 0          # EVICTs it was sent on this GPU


def record(conn: Conn, gpu: Gpu) -> SwapRecord:
    rec = conn.swap.get(gpu.uuid)
    if rec is None:
        rec = conn.swap[gpu.uuid] = SwapRecord()
    return rec


def footprint(conn: Conn, gpu: Gpu) -> int:
    managed, other = conn.memory.get(gpu.uuid, (0, 0))
    return managed + other


# -- events ----------------------------------------------------------------------------------------
def on_residency(state: SchedulerState, conn: Conn, gpu: Gpu, msg: Residency) -> None:
    """RESIDENCY: keep it, count its move in the switch phases, tell the policy."""
    registry = state.registry
    now = registry.now()
    rec = record(conn, gpu)
    answer = bool(msg.flags & RESIDENCY_ANSWER)
    stats = conn.locks.get(gpu)
    swap_in = (not answer and stats is not None and stats.granted is not None
               and not stats.dropped)
    refused = bool(msg.flags & RESIDENCY_REFUSED) and not swap_in  # about its last swap-out
    move = min(msg.move_us / 1e6, SWITCH_REPORT_MAX)
    phase = "swap_in" if swap_in else "swap_out"
    if move > 0:
        setattr(rec, phase, move)
        gpu.stats.phases[phase].observe(move)
        gpu.stats.last_switch.phase(phase, move)
    rec.resident, rec.host, rec.at = msg.resident_bytes, msg.host_bytes, now
    rec.moved_out, rec.refused = not swap_in, refused
    if answer:
        rec.evict_sent = None
    held = footprint(conn, gpu)
    resident = min(msg.resident_bytes, held)
    if lock_log.isEnabledFor(logging.INFO):
        lock_log.info("residency pid=%d gpu=%s %s resident=%s host=%s move=%.1fms%s", conn.pid,
                      gpu.label, "answer" if answer else phase.replace("_", "-"), gib(resident),
                      gib(min(msg.host_bytes, held)), move * 1e3, " refused" if refused else "")
    if refused:
        conn.warnings.warning(("swap-refused", gpu.uuid), "pid=%d gpu=%s could not move its memory "
                              "off the GPU (host memory for swap ran out: its "
                              "NVSHARE_HOST_SWAP_LIMIT or the host's available memory; or it "
                              "cannot leave: NVSHARE_SWAP=off, or the process uses several GPUs; "
                              "its own warning says which): %s of its memory stay on the GPU, and "
                              "a waiter gets no room from it", conn.pid, gpu.label, gib(resident))
    registry.residency(conn, gpu, resident, refused)


def carried_over(state: SchedulerState, conn: Conn, old: SwapRecord | None, gpu: Gpu) -> None:
    """conn's ordinal now names gpu (a move: node/move.py): memory it had all moved out of the
    GPU before is out on gpu too (host copies do not depend on the device), until it reports."""
    if old is None or not old.moved_out or old.resident:
        return
    rec = record(conn, gpu)
    rec.resident, rec.host, rec.moved_out, rec.at = 0, old.host, True, state.registry.now()
    state.registry.residency(conn, gpu, 0, False)


def reclaim_sent(conn: Conn, gpu: Gpu, now: float) -> None:
    """EVICT sent to conn for gpu (registry._carry_out): a switch begins, and it counts."""
    rec = record(conn, gpu)
    rec.evict_sent = now
    rec.reclaims += 1
    gpu.stats.reclaims += 1
    gpu.stats.last_switch.begin(now)


def granted(conn: Conn, gpu: Gpu) -> None:
    """A grant: its memory comes back; what it last reported of a swap-out no longer counts."""
    rec = conn.swap.get(gpu.uuid)
    if rec is not None:
        rec.moved_out = False


def reclaim_pending(conn: Conn, gpu: Gpu) -> bool:
    """conn was sent EVICT for gpu and has not answered it."""
    rec = conn.swap.get(gpu.uuid)
    return rec is not None and rec.evict_sent is not None


# -- views -----------------------------------------------------------------------------------------
def client_resident(gangs, conn: Conn, gpu: Gpu) -> int:
    """The client's bytes on the GPU as the scheduler counts them: its footprint, or what it
    reported after a swap-out since its last grant (cut to the footprint), and at most what the
    policy counts for its job's seat there."""
    held = footprint(conn, gpu)
    resident = held
    rec = conn.swap.get(gpu.uuid)
    if rec is not None and rec.moved_out:
        resident = min(rec.resident, held)
    seat = gangs.seat_of(conn, gpu)
    if seat is not None:
        resident = min(resident, gpu.arbiter.resident_bytes(seat))
    return max(0, resident)


def client_swapped(conn: Conn, gpu: Gpu) -> int:
    """host_bytes it last reported, cut to what it allocated (its footprint) less the bytes it
    said stay on the GPU, and to HOST_MEMORY."""
    rec = conn.swap.get(gpu.uuid)
    return 0 if rec is None else _swapped(rec, footprint(conn, gpu))


def _swapped(rec: SwapRecord, held: int) -> int:
    return min(rec.host, held - min(rec.resident, held), HOST_MEMORY)


def client_fields(gangs, conn: Conn, gpu: Gpu) -> dict:
    """Status fields of one client on one GPU."""
    rec = conn.swap.get(gpu.uuid)
    return {"resident_bytes": client_resident(gangs, conn, gpu),
            "swapped_bytes": client_swapped(conn, gpu),
            "reclaiming": rec is not None and rec.evict_sent is not None,
            "swap_refused": rec is not None and rec.refused,
            "swap_out_seconds": _round(rec.swap_out if rec else None),
            "swap_in_seconds": _round(rec.swap_in if rec else None)}


def swapped_by_gpu(clients) -> dict[str, int]:
    """GPU UUID -> the bytes its clients last reported swapped out (each as client_swapped cuts
    it), at most HOST_MEMORY."""
    total: dict[str, int] = {}
    for c in clients:
        for uuid, rec in c.swap.items():
            if rec.host:
                managed, other = c.memory.get(uuid, (0, 0))
                total[uuid] = min(total.get(uuid, 0) + _swapped(rec, managed + other), HOST_MEMORY)
    return total


def gpu_fields(gpu: Gpu, snapshot, swapped: int, now: float) -> dict:
    """Status fields of one GPU: resident (the policy's total) and swapped bytes, the clients
    being reclaimed, the EVICTs sent and the last switch's phases."""
    last = gpu.stats.last_switch
    return {
        "resident_bytes": snapshot.resident, "swapped_bytes": swapped,
        "reclaiming": sorted(m.pid for seat in snapshot.reclaiming for m in seat.members),
        "reclaims": gpu.stats.reclaims,
        "last_switch": None if last.started is None else {
            "drain": _round(last.drain), "swap_out": _round(last.swap_out),
            "swap_in": _round(last.swap_in), "ago": round(max(0.0, now - last.started), 3)},
    }


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"
