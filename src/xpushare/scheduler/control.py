"""Control operations (nvsharectl): one table, OPS, of op name -> handler and whether it changes
settings. Changing settings is for root, the scheduler's own uid and --admin-group members; GPU
selection (an index, a UUID or a unique UUID prefix) is shared by every op that takes a `gpu`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import __version__
from ..protocol import PRIORITY_LIMIT, MessageType, ProtocolError, encode_json
from . import peer, status
from .policy import TQ_MAX, Mode
from .registry import Gpu
from .state import SchedulerState

if TYPE_CHECKING:
    from .connection import Conn

log = logging.getLogger("nvshare.scheduler")


class CtlError(Exception):
    """A control request that cannot be carried out; its text goes back as `error`."""


@dataclass(frozen=True)
class Op:
    run: Callable[[SchedulerState, dict], dict | None]
    admin: bool  # changes settings: checked with is_admin, and logged


def handle(state: SchedulerState, conn: Conn, msg: dict) -> bytes:
    """The CTL_REPLY frame answering one control request."""
    name = msg.get("op")
    op = OPS.get(name) if isinstance(name, str) else None
    try:
        if op is None:
            raise CtlError(f"unknown op {name!r}")
        if op.admin and not is_admin(state, conn):
            raise CtlError(f"permission denied: uid {conn.uid} may not change scheduler settings "
                           "(root, the scheduler's own uid or --admin-group members only)")
        reply = {"ok": True, **(op.run(state, msg) or {})}
    except CtlError as e:
        reply = {"ok": False, "error": str(e)}
    if op is not None and op.admin:
        log.info("ctl %s from pid=%d uid=%d: %s", name, conn.pid, conn.uid,
                 "ok" if reply["ok"] else reply["error"])
    try:
        return encode_json(MessageType.CTL_REPLY, reply)
    except ProtocolError:  # over MAX_PAYLOAD: a frame cannot carry it
        return encode_json(MessageType.CTL_REPLY, {
            "ok": False, "error": f"reply too large for one frame ({len(state.conns)} connections)"})


def is_admin(state: SchedulerState, conn: Conn) -> bool:
    if conn.uid in (0, os.geteuid()):
        return True
    gid = state.config.admin_gid
    return gid is not None and gid in peer.groups(conn.pid, conn.gid)


def select_gpus(state: SchedulerState, sel) -> list[Gpu]:
    """Every GPU for None; else the one GPU an index, a UUID or a unique UUID prefix names."""
    gpus = list(state.registry.gpus.values())
    if sel is None:
        return gpus
    if isinstance(sel, bool) or not isinstance(sel, (int, str)):
        raise CtlError(f"invalid gpu {sel!r}: give an index or a UUID")
    found = [g for g in gpus if g.matches(sel)]
    if not found and isinstance(sel, str) and not sel.isdigit():  # a unique UUID prefix
        found = [g for g in gpus if g.uuid.lower().startswith(sel.lower())]
    if len(found) != 1:
        raise CtlError(f"no GPU matches {sel!r}" if not found else f"{sel!r} matches several GPUs")
    return found


def op_ping(state: SchedulerState, msg: dict) -> dict:
    return {"version": __version__}


def op_set_tq(state: SchedulerState, msg: dict) -> None:
    seconds = msg.get("seconds")
    if seconds == "auto":
        tq = None
    elif isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise CtlError(f"invalid seconds {seconds!r}: a positive integer, or \"auto\" for the "
                       "dynamic quantum")
    elif seconds > TQ_MAX:
        raise CtlError(f"invalid seconds {seconds}: at most {TQ_MAX:.0f} (the quantum is sent to "
                       "clients in milliseconds as a 32-bit number)")
    else:
        tq = float(seconds)
    gpus = select_gpus(state, msg.get("gpu"))
    if msg.get("gpu") is None:
        state.registry.default_tq = tq
    for gpu in gpus:
        state.registry.apply(gpu, gpu.arbiter.set_tq, tq)


def op_set_mode(state: SchedulerState, msg: dict) -> None:
    try:
        mode = Mode(msg.get("mode"))
    except ValueError:
        raise CtlError(f"invalid mode {msg.get('mode')!r}: auto, serial or off") from None
    gpus = select_gpus(state, msg.get("gpu"))
    if msg.get("gpu") is None:
        state.registry.default_mode = mode
    for gpu in gpus:
        state.registry.apply(gpu, gpu.arbiter.set_mode, mode)


def op_set_gpu_memory(state: SchedulerState, msg: dict) -> None:
    size = msg.get("bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CtlError(f"invalid bytes {size!r}: a positive integer, or 0 to clear")
    if msg.get("gpu") is None:
        raise CtlError("set_gpu_memory needs a gpu")
    for gpu in select_gpus(state, msg["gpu"]):
        gpu.capacity_override = size
        state.registry.capacity_changed(gpu)


def op_set_priority(state: SchedulerState, msg: dict) -> dict:
    prio = msg.get("priority")
    if isinstance(prio, bool) or not isinstance(prio, int) or abs(prio) > PRIORITY_LIMIT:
        raise CtlError(f"invalid priority {prio!r}: an integer from {-PRIORITY_LIMIT} to "
                       f"{PRIORITY_LIMIT}")
    key = "pid" if "pid" in msg else "client_id" if "client_id" in msg else None
    value = msg.get(key)
    if key is None or isinstance(value, bool) or not isinstance(value, int):
        raise CtlError("set_priority needs a pid or a client_id (an integer)")
    targets = [c for c in state.clients() if (c.pid if key == "pid" else c.id) == value]
    if not targets:
        raise CtlError(f"no client with {key} {value}")
    for conn in targets:
        conn.priority = prio
        log.info("priority pid=%d client=%d priority=%d", conn.pid, conn.id, prio)
        for gpu in conn.gpus():
            state.registry.apply(gpu, gpu.arbiter.set_priority, conn, prio)
    return {"clients": len(targets)}


OPS: dict[str, Op] = {
    "ping": Op(op_ping, admin=False),
    "status": Op(status.build, admin=False),
    "set_tq": Op(op_set_tq, admin=True),
    "set_mode": Op(op_set_mode, admin=True),
    "set_gpu_memory": Op(op_set_gpu_memory, admin=True),
    "set_priority": Op(op_set_priority, admin=True),
}
