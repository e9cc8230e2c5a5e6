"""The status view (nvsharectl status): the scheduler's settings, every GPU as its policy snapshot
shows it, and every client with what it told the scheduler. Read-only; JSON-ready dicts."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from .. import __version__
from ..protocol import MAX_PAYLOAD
from .registry import Gpu
from .state import SchedulerState

if TYPE_CHECKING:
    from .connection import Conn

COMMAND_MAX = 256  # characters of a client's command line in status (a reply is one 64 KiB frame)
COMMAND_SHORT = 32  # ... when the reply would not fit otherwise


def build(state: SchedulerState, msg: dict | None = None) -> dict:
    now = state.registry.now()
    registry = state.registry
    reply = {
        "scheduler": {"pid": os.getpid(), "uid": os.geteuid(), "version": __version__,
                      "socket": str(state.config.socket_path), "mode": registry.default_mode.value,
                      "tq": registry.default_tq if registry.default_tq is not None else "auto"},
        "gpus": [gpu_status(g, now) for g in registry.in_order()],
        "clients": [client_status(state, c) for c in state.clients()],
    }
    # A reply is one frame (MAX_PAYLOAD): with very many clients, shorten the command lines.
    if len(json.dumps(reply, separators=(",", ":"))) > MAX_PAYLOAD - 256:
        for c in reply["clients"]:
            c["command"] = c["command"][:COMMAND_SHORT]
    return reply


def gpu_status(g: Gpu, now: float) -> dict:
    s = g.arbiter.snapshot(now)
    return {
        "index": g.index, "uuid": g.uuid, "name": g.name, "memory_total": g.memory_total,
        "capacity": g.capacity, "mode": s.mode.value,
        "operation": s.operation, "why": s.why, "used": s.used, "budget": s.budget,
        "tq": s.tq, "tq_source": s.tq_source, "switch_cost": s.switch_cost,
        "holders": [{"pid": h.client.pid, "client_id": h.client.id, "priority": h.client.priority,
                     "held_for": round(h.held_for, 3), "dropping": h.dropping}
                    for h in s.holders],
        "queue": [c.pid for c in s.queue],
        "blocked": [w.client.pid for w in s.waiters],
    }


def client_status(state: SchedulerState, c: Conn) -> dict:
    states = {g.uuid: g.arbiter.state_of(c) for g in c.gpus()}
    pod = c.pod
    hint = {"namespace": c.hello.pod_namespace, "name": c.hello.pod_name}
    return {
        "client_id": c.id, "pid": c.pid, "uid": c.uid, "command": c.command[:COMMAND_MAX],
        "priority": c.priority,
        "state": next((s for s in ("holding", "waiting") if s in states.values()), "idle"),
        "gpus": [{"device": dev, "uuid": g.uuid, "index": g.index, "state": states[g.uuid],
                  "managed_bytes": c.memory.get(g.uuid, (0, 0))[0],
                  "other_bytes": c.memory.get(g.uuid, (0, 0))[1]}
                 for dev, g in sorted(c.devices.items())],
        "pod": None if pod is None else {k: getattr(pod, k, None)
                                         for k in ("namespace", "name", "uid", "container_id")},
        "pod_hint": hint if (hint["name"] or hint["namespace"]) else None,
    }
