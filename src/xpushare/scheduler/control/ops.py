"""Control operations (nvsharectl): one table, OPS, of op name -> handler, whether it changes
settings, and the schema of its fields (ctlschema.py). Who may change settings, what a requester
sees of other users' clients and how many requests a non-admin uid may make are access.py's; GPU
selection (an index, a UUID or a unique UUID prefix) is shared
by every op that takes a `gpu`. A request is checked against its op's schema before the handler
runs, so handlers see only fields of the right type and range."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import __version__
from ...wire.protocol import (
    PRIORITY_LIMIT, Attach, Attached, MessageType, encode_json,
)
from . import placement, statusreply
from ..node import move, pinahead, suspend
from ..node.access import is_admin, may_run, viewer
from ...wire.ctlschema import (
    Choice, Field, GpuSelector, Int, Invalid, PodName, Schema, Uid, show, unsigned_max, validate,
)
from ..policy import TQ_MAX, Mode
from ...wire.quota_ranges import CLEAR, COMPUTE_LIMIT, COMPUTE_SHARE, MEMORY_LIMIT
from ...wire.scheduling import CAPACITY_MAX, CAPACITY_TEXT
from ..node.registry import Gpu
from ..node.state import SchedulerState

if TYPE_CHECKING:
    from ..shell.connection import Conn

log = logging.getLogger("nvshare.scheduler")


class CtlError(Exception):
    """A control request that cannot be carried out; its text goes back as `error`."""


@dataclass(frozen=True)
class Op:
    run: Callable[[SchedulerState, dict], dict | None] | None  # gets what validate() returned
    admin: bool  # changes settings: checked with is_admin, and logged
    schema: Schema = Schema()
    # A reply too costly to build at once (status): the steps of statusreply, given what the
    # requester may see; start() returns them instead of a frame.
    steps: Callable | None = None
    claims: bool = False  # a DRA claim's limits: also open to --claims-socket (access.may_run)


def handle(state: SchedulerState, conn: Conn, msg: dict) -> bytes:
    """The CTL_REPLY frame answering one control request, built at once."""
    reply = start(state, conn, msg)
    return reply if isinstance(reply, bytes) else statusreply.run_to_end(reply)


def start(state: SchedulerState, conn: Conn, msg: dict) -> bytes | statusreply.Steps:
    """The CTL_REPLY frame answering one control request (any JSON value: the frame decoder only
    passes objects, but nothing here relies on it), or the steps that build it."""
    name = msg.get("op") if isinstance(msg, dict) else None
    op = OPS.get(name) if isinstance(name, str) else None
    try:
        if not isinstance(msg, dict):
            raise CtlError("a control request is a JSON object")
        if op is None:
            raise CtlError(f"unknown op {show(name)}")
        admin = is_admin(state, conn)
        if op.admin and not may_run(state, conn, op.claims):
            raise CtlError(f"permission denied: uid {conn.uid} may not change scheduler settings "
                           "(root, the scheduler's own uid or --admin-group members only)")
        wait = 0.0 if admin or conn.claims_socket else state.requests.take(conn.uid)
        if wait:
            raise CtlError(f"too many control requests from uid {conn.uid} (at most "
                           f"{state.requests.rate:g} a second, {state.requests.burst} at once); "
                           f"try again in {wait:.2f}s")
        fields = validate(name, op.schema, msg)
        if op.steps is not None:
            return op.steps(state, viewer(state, conn))
        reply = {"ok": True, **(op.run(state, fields) or {})}
    except (CtlError, Invalid) as e:
        reply = {"ok": False, "error": str(e)}
    if op is not None and op.admin:
        state.client_log.info(conn, "ctl %s from pid=%d uid=%d: %s", name, conn.pid, conn.uid,
                              "ok" if reply["ok"] else reply["error"])
    return encode_json(MessageType.CTL_REPLY, reply)


def select_gpus(state: SchedulerState, sel) -> list[Gpu]:
    """Every GPU for None; else the one GPU an index, a UUID or a unique UUID prefix names (`sel`
    is what GPU_SELECTOR accepted, or None)."""
    gpus = list(state.registry.gpus.values())
    if sel is None:
        return gpus
    found = [g for g in gpus if g.matches(sel)]
    if not found and isinstance(sel, str) and not sel.isdigit():  # a unique UUID prefix
        found = [g for g in gpus if g.uuid.lower().startswith(sel.lower())]
    if len(found) != 1:
        raise CtlError(f"no GPU matches {show(sel)}" if not found
                       else f"{show(sel)} matches several GPUs")
    return found


def op_ping(state: SchedulerState, msg: dict) -> dict:
    return {"version": __version__}


def op_shutdown(state: SchedulerState, msg: dict) -> dict:
    """Stop serving as SIGTERM does; the reply goes out first (the stop runs after this callback).
    Clients run ungated until a scheduler answers again."""
    if state.request_stop is None:
        raise CtlError("this scheduler is not serving")
    log.info("shutdown requested (nvsharectl shutdown)")
    state.request_stop()
    return {"clients": len(state.clients())}


def _per_gpu(state: SchedulerState, msg: dict, default: str, setter: str, value) -> None:
    """A setting of the GPUs `gpu` names, or of every GPU and of those to come (the registry's
    default) without one; a GPU that is not there refuses it before anything changes."""
    gpus = select_gpus(state, msg.get("gpu"))
    if msg.get("gpu") is None:
        setattr(state.registry, default, value)
    for gpu in gpus:
        state.registry.apply(gpu, getattr(gpu.arbiter, setter), value)


def op_set_tq(state: SchedulerState, msg: dict) -> None:
    _per_gpu(state, msg, "default_tq", "set_tq",
             None if msg["seconds"] == "auto" else float(msg["seconds"]))


def op_set_mode(state: SchedulerState, msg: dict) -> None:
    _per_gpu(state, msg, "default_mode", "set_mode", Mode(msg["mode"]))
    for gpu in select_gpus(state, msg.get("gpu")):
        pinahead.gpu_changed(state, gpu)  # mode off never swaps


def op_set_gpu_memory(state: SchedulerState, msg: dict) -> None:
    for gpu in select_gpus(state, msg["gpu"]):
        gpu.capacity_override = msg["bytes"]
        state.registry.capacity_changed(gpu)
        pinahead.gpu_changed(state, gpu)


def _clients(state: SchedulerState, msg: dict) -> list[Conn]:
    """The clients a request's pid or client_id names; CtlError for none."""
    key = "pid" if "pid" in msg else "client_id"
    value = msg[key]
    targets = [c for c in state.clients() if (c.pid if key == "pid" else c.id) == value]
    if not targets:
        raise CtlError(f"no client with {key} {value}")
    return targets


def op_set_priority(state: SchedulerState, msg: dict) -> dict:
    prio = msg["priority"]
    targets = _clients(state, msg)
    for conn in targets:
        conn.priority = conn.own_priority = prio
        log.info("priority pid=%d client=%d priority=%d", conn.pid, conn.id, prio)
        state.registry.set_priority(conn, prio)
    return {"clients": len(targets)}


def _set_quota(field: str, convert: Callable):
    """An op setting one quota field (quotas.py) of a pod's clients (now and later) or of the
    clients a pid or client id names; "none" clears a limit."""
    def op(state: SchedulerState, msg: dict) -> dict:
        value = None if msg["value"] == CLEAR else convert(msg["value"])
        if "pod" in msg:
            namespace, name = msg["pod"]
            targets = state.quotas.set_pod(namespace, name, field, value)
            log.info("%s pod=%s/%s %s (%d clients now)", field, namespace, name, value, len(targets))
        else:
            targets = _clients(state, msg)
            state.quotas.set_clients(targets, field, value)
            log.info("%s %s", field, ", ".join(f"pid={c.pid} client={c.id}" for c in targets))
        return {"clients": len(targets)}
    return op


def op_set_claim(state: SchedulerState, msg: dict) -> dict:
    """nvshare-dra-plugin: a prepared ResourceClaim's limits for one pod (quotas.py, source
    "claim"); a field the request leaves out is not set by the claim."""
    values = {}
    for field, convert in (("compute_limit", lambda pct: pct / 100.0), ("compute_share", float),
                           ("memory_limit", int), ("latency_sensitive", _on)):
        if field in msg:
            values[field] = None if msg[field] == CLEAR else convert(msg[field])
    targets = state.quotas.set_claim(msg["pod_uid"], msg["claim"], values)
    log.info("claim %s pod_uid=%s %s (%d clients now)", msg["claim"], msg["pod_uid"], values, len(targets))
    return {"clients": len(targets)}


def _on(value: str) -> bool:
    return value == "on"


def op_clear_claim(state: SchedulerState, msg: dict) -> dict:
    return {"pods": state.quotas.clear_claim(msg["claim"])}


def op_place(state: SchedulerState, msg: dict) -> dict:
    """The `count` least-loaded GPUs for a job (placement.py has the ranking). Open to every local
    user: it changes nothing and tells less than status does."""
    memory = msg.get("memory", 0)
    try:
        chosen = placement.choose(gpu_loads(state), msg["count"], memory)
    except placement.PlacementError as e:
        raise CtlError(str(e)) from None
    return {"gpus": [{"index": g.index, "uuid": g.uuid} for g in chosen],
            "why": [placement.reason(g, memory) for g in chosen]}


def gpu_loads(state: SchedulerState) -> list[placement.GpuLoad]:
    """Each GPU's load as placement reads it. Only GPUs from NVML are placed on: a client-made one
    may be a device this node's CUDA cannot see, and is forgotten with its last client."""
    attached: dict[Gpu, list[Conn]] = {}
    for c in state.clients():
        for g in c.gpus():
            attached.setdefault(g, []).append(c)
    loads = []
    for g in state.registry.in_order():
        clients, arb = attached.get(g, []), g.arbiter
        # The arbiter's clients are the jobs' seats (policy/gang.py): their footprints are the
        # members'. The sizes of the public maps, not a snapshot: that sorts the waiters, and
        # only counts are needed here.
        seats = {state.registry.gangs.seat_of(c, g) for c in clients} - {None}
        loads.append(placement.GpuLoad(
            g.index, g.uuid, g.capacity, arb.footprints(seats), len(arb.waiting),
            len(arb.holders), sum(c.quota.compute_limit or placement.UNLIMITED for c in clients),
            healthy=g.made_by is None))
    return loads


# -- the schema of each op's fields: bounded by what the protocol carries --------------------------

# An NVML index (an unsigned 32-bit number), or a UUID (prefix) no longer than ATTACH's uuid field.
GPU_SELECTOR = GpuSelector(max_index=2**32 - 1, max_len=Attach.layout()["uuid"][1])
SECONDS = Int(1, int(TQ_MAX), 'a positive integer, or "auto" for the dynamic quantum', words=("auto",),
              high=f"at most {TQ_MAX:.0f} (the quantum is sent to clients in milliseconds as a "
                   "32-bit number)")
BYTES = Int(0, CAPACITY_MAX, "a positive integer, or 0 to clear",
            high=f"{CAPACITY_TEXT} (a room within it travels in MiB as a 32-bit number)")
ATTACHED_MAX = unsigned_max(Attached, "capacity")  # ATTACHED tells clients the capacity
PRIORITY = Int(-PRIORITY_LIMIT, PRIORITY_LIMIT,
               f"an integer from {-PRIORITY_LIMIT} to {PRIORITY_LIMIT}")
PID = Int(1, 2**31 - 1, "a process id (a positive integer)")  # pid_t is a signed 32-bit number
CLIENT_ID = Int(1, 2**63 - 1, "a client id (a positive integer)")  # WELCOME's, counted from 1
COUNT = Int(1, 2**31 - 1, "how many GPUs: a positive integer")
JOB_MEMORY = Int(0, ATTACHED_MAX, "bytes the job needs on each GPU (a non-negative integer; 0: none "
                 "named)")
ON_OFF = Choice(("on", "off"))
TARGET = (Field("pid", PID), Field("client_id", CLIENT_ID), Field("pod", PodName()))

def _suspend_op(act, verb: str):
    """suspend / resume of the clients a pid or client id names (node/suspend.py)."""
    def op(state: SchedulerState, msg: dict) -> dict:
        done = []
        for conn in _clients(state, msg):
            why = act(state, conn, "nvsharectl")
            done.append({"pid": conn.pid, "client_id": conn.id, verb: why is None, "why": why})
        return {"clients": done}
    return op


def op_move(state: SchedulerState, msg: dict) -> dict:
    """Move the client a pid or client id names to the GPU `to` names (node/move.py); it goes on
    in the background (status shows each client's `move`)."""
    target = select_gpus(state, msg["to"])[0]
    done = []
    for conn in _clients(state, msg):
        why = move.order(state, conn, target, "nvsharectl")
        done.append({"pid": conn.pid, "client_id": conn.id, "moving": why is None, "why": why,
                     "to": target.uuid})
    return {"clients": done}


OPS: dict[str, Op] = {
    "ping": Op(op_ping, admin=False),
    "shutdown": Op(op_shutdown, admin=True),
    "status": Op(None, admin=False, steps=statusreply.steps),
    "place": Op(op_place, admin=False, schema=Schema((
        Field("count", COUNT, required=True), Field("memory", JOB_MEMORY)))),
    "set_tq": Op(op_set_tq, admin=True, schema=Schema((
        Field("seconds", SECONDS, required=True), Field("gpu", GPU_SELECTOR)))),
    "set_mode": Op(op_set_mode, admin=True, schema=Schema((
        Field("mode", Choice(tuple(m.value for m in Mode)), required=True),
        Field("gpu", GPU_SELECTOR)))),
    "set_gpu_memory": Op(op_set_gpu_memory, admin=True, schema=Schema((
        Field("bytes", BYTES, required=True), Field("gpu", GPU_SELECTOR, required=True)))),
    "suspend": Op(_suspend_op(suspend.ask, "suspending"), admin=True, schema=Schema((
        Field("pid", PID), Field("client_id", CLIENT_ID)), one_of=("pid", "client_id"))),
    "resume": Op(_suspend_op(suspend.wake, "resuming"), admin=True, schema=Schema((
        Field("pid", PID), Field("client_id", CLIENT_ID)), one_of=("pid", "client_id"))),
    "move": Op(op_move, admin=True, schema=Schema((
        Field("to", GPU_SELECTOR, required=True), Field("pid", PID), Field("client_id", CLIENT_ID)),
        one_of=("pid", "client_id"))),
    "set_priority": Op(op_set_priority, admin=True, schema=Schema((
        Field("priority", PRIORITY, required=True), Field("pid", PID),
        Field("client_id", CLIENT_ID)), one_of=("pid", "client_id"))),
    "set_claim": Op(op_set_claim, admin=True, claims=True, schema=Schema((
        Field("claim", Uid(), required=True), Field("pod_uid", Uid(), required=True),
        Field("compute_limit", COMPUTE_LIMIT), Field("compute_share", COMPUTE_SHARE),
        Field("memory_limit", MEMORY_LIMIT), Field("latency_sensitive", ON_OFF)))),
    "clear_claim": Op(op_clear_claim, admin=True, claims=True,
                      schema=Schema((Field("claim", Uid(), required=True),))),
    "set_compute_limit": Op(_set_quota("compute_limit", lambda pct: pct / 100.0), admin=True,
                            schema=Schema((Field("value", COMPUTE_LIMIT, required=True), *TARGET),
                                          one_of=("pid", "client_id", "pod"))),
    "set_compute_share": Op(_set_quota("compute_share", float), admin=True,
                            schema=Schema((Field("value", COMPUTE_SHARE, required=True), *TARGET),
                                          one_of=("pid", "client_id", "pod"))),
    # An admin's: it asks every other client of the client's GPUs to keep its queue short.
    "set_latency_sensitive": Op(_set_quota("latency_sensitive", _on), admin=True,
                                schema=Schema((Field("value", ON_OFF, required=True), *TARGET),
                                              one_of=("pid", "client_id", "pod"))),
    "set_memory_limit": Op(_set_quota("memory_limit", int), admin=True,
                           schema=Schema((Field("value", MEMORY_LIMIT, required=True), *TARGET),
                                         one_of=("pid", "client_id", "pod"))),
}
