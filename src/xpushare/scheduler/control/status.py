"""The status view (nvsharectl status, top): every GPU as its policy snapshot shows it, every client
with what it told the scheduler, the jobs; what a requester may see of other users' clients is
access.Viewer's. Read-only; JSON-ready dicts, one per GPU, client or job: statusreply.py builds the
reply from them a slice at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_LATENCY_SENSITIVE
from ..node import metrics, swap
from ..node.access import Viewer
from ..node.registry import Gpu
from ..node.state import SchedulerState

if TYPE_CHECKING:
    from ..shell.connection import Conn

COMMAND_MAX = 256  # characters of a client's command line in status (a reply is one frame)


def gpu_status(g: Gpu, now: float, swapped: int, viewer: Viewer) -> dict:
    """swapped: the bytes its clients last reported swapped out (swap.swapped_by_gpu)."""
    s = g.arbiter.snapshot(now)
    return {
        "index": g.index, "uuid": g.uuid, "name": g.name, "memory_total": g.memory_total,
        "capacity": g.capacity, "capacity_source": g.capacity_source, "mode": s.mode.value,
        "operation": s.operation, "why": s.why, "used": s.used, "budget": s.budget,
        "tq": s.tq, "tq_source": s.tq_source, "switch_cost": s.switch_cost,
        # The arbiter's clients are jobs' seats (policy/gang.py): a holder entry per member
        # granted; a seat held while its job acquires its other GPUs lists its members as
        # "reserved".
        "holders": [{"pid": m.pid, "client_id": m.id, "priority": m.priority,
                     "held_for": round(h.held_for, 3), "dropping": h.dropping, "share": h.share,
                     "job": viewer.job_label(h.client.job), "reserved": not h.client.holding}
                    for h in s.holders for m in _members(h.client.holding or h.client.members)],
        "queue": [m.pid for seat in s.queue for m in _members(seat.members)],
        "blocked": [m.pid for w in s.waiters for m in _members(w.client.members)],
        **swap.gpu_fields(g, s, swapped, now),
    }


def _members(conns) -> list:
    return sorted(conns, key=lambda c: c.id)


def job_shown(job) -> bool:
    """Jobs of more than one member or GPU: a process alone on one GPU is no news."""
    return len(job.members) > 1 or len(job.seats) > 1 or job.size is not None


def job_status(job, viewer: Viewer) -> dict:
    # uid: jobs named alike by two users are two jobs (jobs.py keys them per uid).
    uid = job.key[1] if job.key[0] in ("name", "torchrun") else None
    return {"job": viewer.job_label(job), "kind": job.key[0], "uid": uid, "state": job.phase.value,
            "formed": job.formed, "size": job.size,
            "members": [c.pid for c in _members(job.members)],
            "gpus": sorted((g.index if g.index is not None else g.uuid for g in job.seats),
                           key=lambda x: (isinstance(x, str), x))}


def client_status(state: SchedulerState, c: Conn, now: float, viewer: Viewer,
                  command_max: int = COMMAND_MAX) -> dict:
    gangs = state.registry.gangs
    states = {g.uuid: gangs.state_of(c, g) for g in c.gpus()}
    job = gangs.job_of.get(c)
    pod = c.pod
    hint = {"namespace": c.hello.pod_namespace, "name": c.hello.pod_name}
    quota, sources = state.quotas.effective(c)
    full = viewer.sees(c)  # another user's command line and pod are not shown to a non-admin
    return {
        "client_id": c.id, "pid": c.pid, "uid": c.uid,
        "command": c.command[:command_max] if full else None,
        "priority": c.priority,
        "latency_sensitive": bool(quota.latency_sensitive),
        "declared_latency_sensitive": bool(c.hello.flags & HELLO_LATENCY_SENSITIVE),
        # held by latency-sensitive clients' bursts: how often, and for how long in all
        "held": {"count": c.held[0], "seconds": round(c.held[1], 6)},
        "state": _state(c, states),
        "suspend": c.suspend.view(now),
        "move": c.suspend.move_view(now),
        "quota": {"compute_limit": None if quota.compute_limit is None
                  else round(quota.compute_limit * 100, 3),
                  "compute_share": quota.compute_share, "memory_limit": quota.memory_limit,
                  "latency_sensitive": bool(quota.latency_sensitive),
                  "sources": sources, "applied_by_client": c.quota_env is not None},
        "gpus": [{**_client_gpu(c, dev, g, states[g.uuid], quota, now),
                  **swap.client_fields(gangs, c, g)} for dev, g in sorted(c.devices.items())],
        "pod": None if pod is None or not full else {
            k: getattr(pod, k, None) for k in ("namespace", "name", "uid", "container_id")},
        "pod_hint": hint if full and (hint["name"] or hint["namespace"]) else None,
        "job": None if job is None or not job_shown(job) else viewer.job_label(job),
    }


def _state(c: Conn, states: dict) -> str:
    """A client's state: where it is in a suspension or a move (node/suspend.py, move.py), else
    whether it holds or waits for a GPU."""
    phase = c.suspend.phase
    if c.suspend.move is not None:
        return "moving"
    if phase:
        return {"suspended": "suspended", "moving": "suspending", "checkpointing": "suspending"}.get(
            phase, "resuming")
    return next((s for s in ("holding", "waiting") if s in states.values()), "idle")


def _client_gpu(c: Conn, dev: int, g, state: str, quota, now: float) -> dict:
    managed, other = c.memory.get(g.uuid, (0, 0))
    stats = c.locks.get(g)
    ratio = None if stats is None else metrics.busy_ratio(stats, now)
    limit = quota.memory_limit
    return {"device": dev, "uuid": g.uuid, "index": g.index, "state": state,
            "managed_bytes": managed, "other_bytes": other,
            "gpu_busy_seconds": round(metrics.busy_seconds(stats, now), 6) if stats else 0.0,
            "gpu_busy_ratio": None if ratio is None else round(ratio, 4),  # over metrics.BUSY_WINDOW
            "queueing_delay": metrics.queueing_delay(stats, now),
            "over_memory_limit": limit is not None and managed + other > limit,
            # told PREPARE_SWAP on (pinahead.py), told nobody waits (waiters.py)
            "pinning_ahead": g in c.pin_ahead, "keeps_idle_lock": c.waiters_told.get(g) == 0}
