"""The status view (nvsharectl status): the scheduler's settings, every GPU as its policy snapshot
shows it, and every client with what it told the scheduler. Read-only; JSON-ready dicts."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from .. import __version__
from ..protocol import MAX_CTL_REPLY
from . import metrics, swap
from .registry import Gpu
from .state import SchedulerState

if TYPE_CHECKING:
    from .connection import Conn

COMMAND_MAX = 256  # characters of a client's command line in status (a reply is one frame)
COMMAND_SHORT = 32  # ... when the reply would not fit otherwise
REPLY_MAX = MAX_CTL_REPLY - 256  # what status fills of a frame, kept below it: the "ok" field, and
                               # the counts of GPUs not listed added after the sizes are taken


def build(state: SchedulerState, msg: dict | None = None) -> dict:
    now = state.registry.now()
    registry = state.registry
    clients = state.clients()
    swapped = swap.swapped_by_gpu(clients)
    reply = {
        "scheduler": {"pid": os.getpid(), "uid": os.geteuid(), "version": __version__,
                      "socket": str(state.config.socket_path), "mode": registry.default_mode.value,
                      "tq": registry.default_tq if registry.default_tq is not None else "auto"},
        "gpus": [gpu_status(g, now, swapped.get(g.uuid, 0)) for g in registry.in_order()],
        "clients": [client_status(state, c, now) for c in clients],
        "jobs": [job_status(j) for j in registry.gangs.jobs.values() if job_shown(j)],
    }
    # A reply is one frame (MAX_CTL_REPLY): with very many clients, shorten the command lines; with
    # very many client-made GPUs, list only those that fit.
    if _size(reply) > REPLY_MAX:
        for c in reply["clients"]:
            c["command"] = c["command"][:COMMAND_SHORT]
    if _size(reply) > REPLY_MAX:
        _list_made_up_gpus_that_fit(reply)
    return reply


def _size(value) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def _list_made_up_gpus_that_fit(reply: dict) -> None:
    """Keep NVML's GPUs, and the client-made ones (index null) in order while they fit in the
    frame with the clients' entries for them; say how many are left out (`gpus_not_listed`, in the
    reply and in each client). The counts start at their largest, so the reply only shrinks."""
    made = [g for g in reply["gpus"] if g["index"] is None]
    reply["gpus"] = [g for g in reply["gpus"] if g["index"] is not None]
    reply["gpus_not_listed"] = len(made)
    entries: dict[str, list[tuple[dict, dict]]] = {}   # uuid -> (client, its entry for the GPU)
    for c in reply["clients"]:
        mine = [d for d in c["gpus"] if d["index"] is None]
        for d in mine:
            entries.setdefault(d["uuid"], []).append((c, d))
        c["gpus"] = [d for d in c["gpus"] if d["index"] is not None]
        c["gpus_not_listed"] = len(mine)
    room = REPLY_MAX - _size(reply)
    for g in made:
        pairs = entries.get(g["uuid"], [])
        cost = _size(g) + 1 + sum(_size(d) + 1 for _, d in pairs)
        if cost > room:
            break
        room -= cost
        reply["gpus"].append(g)
        reply["gpus_not_listed"] -= 1
        for c, d in pairs:
            c["gpus"].append(d)
            c["gpus_not_listed"] -= 1
    for c in reply["clients"]:
        c["gpus"].sort(key=lambda d: d["device"])


def gpu_status(g: Gpu, now: float, swapped: int = 0) -> dict:
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
                     "job": h.client.job.label, "reserved": not h.client.holding}
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


def job_status(job) -> dict:
    # uid: jobs named alike by two users are two jobs (jobs.py keys them per uid).
    uid = job.key[1] if job.key[0] in ("name", "torchrun") else None
    return {"job": job.label, "kind": job.key[0], "uid": uid, "state": job.phase.value,
            "formed": job.formed, "size": job.size,
            "members": [c.pid for c in _members(job.members)],
            "gpus": sorted((g.index if g.index is not None else g.uuid for g in job.seats),
                           key=lambda x: (isinstance(x, str), x))}


def client_status(state: SchedulerState, c: Conn, now: float) -> dict:
    gangs = state.registry.gangs
    states = {g.uuid: gangs.state_of(c, g) for g in c.gpus()}
    job = gangs.job_of.get(c)
    pod = c.pod
    hint = {"namespace": c.hello.pod_namespace, "name": c.hello.pod_name}
    quota, sources = state.quotas.effective(c)
    return {
        "client_id": c.id, "pid": c.pid, "uid": c.uid, "command": c.command[:COMMAND_MAX],
        "priority": c.priority,
        "state": next((s for s in ("holding", "waiting") if s in states.values()), "idle"),
        "quota": {"compute_limit": None if quota.compute_limit is None
                  else round(quota.compute_limit * 100, 3),
                  "compute_share": quota.compute_share, "memory_limit": quota.memory_limit,
                  "sources": sources, "applied_by_client": c.quota_env is not None},
        "gpus": [{**_client_gpu(c, dev, g, states[g.uuid], quota, now),
                  **swap.client_fields(gangs, c, g)} for dev, g in sorted(c.devices.items())],
        "pod": None if pod is None else {k: getattr(pod, k, None)
                                         for k in ("namespace", "name", "uid", "container_id")},
        "pod_hint": hint if (hint["name"] or hint["namespace"]) else None,
        "job": None if job is None or not job_shown(job) else job.label,
    }


def _client_gpu(c: Conn, dev: int, g, state: str, quota, now: float) -> dict:
    managed, other = c.memory.get(g.uuid, (0, 0))
    stats = c.locks.get(g)
    ratio = None if stats is None else metrics.busy_ratio(stats, now)
    limit = quota.memory_limit
    return {"device": dev, "uuid": g.uuid, "index": g.index, "state": state,
            "managed_bytes": managed, "other_bytes": other,
            "gpu_busy_seconds": round(metrics.busy_seconds(stats, now), 6) if stats else 0.0,
            "gpu_busy_ratio": None if ratio is None else round(ratio, 4),  # over metrics.BUSY_WINDOW
            "over_memory_limit": limit is not None and managed + other > limit}
