"""What each message from a peer does: HANDLERS maps a message type to its handler.

A handler gets the scheduler's state, the connection (connection.Conn) and the decoded message.
Lock messages become events on the GPU's arbiter through registry.apply; control requests go to
control/ops.py. A message out of the protocol's order raises ProtocolError, which closes this
connection only (connection.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ...wire.protocol import (
    FEATURE_BUSY, FEATURE_BUSY_SPANS, FEATURE_JOBS, FEATURE_QUOTAS, FEATURE_SUSPEND, FEATURE_SWAP,
    HELLO_LATENCY_SENSITIVE, HELLO_SWAP, ResumeRequest, SuspendReady,
    PRIORITY_LIMIT, VERSION, Attach, Attached, Burst, BusySpans, BusyUpdate, Hello, Job, LockRequest,
    MemUpdate, MessageType, ProtocolError, Released, ReleaseReason, Residency, Settings, Welcome,
    encode, encode_error, encode_json,
)
from ..node import access, latency, metrics, move, pinahead, suspend, swap
from ..control import ops, rehome
from ..node.jobinfo import job_info
from ..policy import SwitchReport, claimed_latency_sensitive, claimed_priority, raises
from ..node.registry import Gpu, Refused, lock_log
from ..node.state import SchedulerState

if TYPE_CHECKING:
    from .connection import Conn

log = logging.getLogger("nvshare.scheduler")


FEATURES = (FEATURE_BUSY | FEATURE_QUOTAS | FEATURE_JOBS | FEATURE_SWAP  # what WELCOME offers
            | FEATURE_BUSY_SPANS | FEATURE_SUSPEND)


def _require_hello(conn: Conn) -> None:
    if conn.hello is None:
        raise ProtocolError("HELLO must come first")


def _attached_gpu(conn: Conn, dev: int) -> Gpu | None:
    gpu = conn.devices.get(dev)
    if gpu is None:
        conn.warnings.warning("unattached", "pid=%d: device %d was never attached; ignored",
                              conn.pid, dev)
        conn.send(encode_error(f"device {dev} is not attached"))
    return gpu


def on_hello(state: SchedulerState, conn: Conn, msg: Hello) -> None:
    if conn.hello is not None or conn.ctl:
        raise ProtocolError("HELLO sent twice, or on a control connection")
    conn.hello = msg
    declared = conn.own_priority = max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, msg.priority))
    # What a process says of itself may lower its claim, not raise it over other users'
    # (declared.py); as declared it orders it among its own user's processes (owners.py).
    conn.priority = claimed_priority(
        declared, not raises(declared) or access.may_raise_itself(state, conn))
    # The policy learns it when the client joins its job, at its first ATTACH (registry.join),
    # before any of its seats can be reclaimed.
    conn.swappable = bool(msg.flags & HELLO_SWAP)
    # Latency-sensitive asks the GPU's other clients for short queues: a raise, as a priority
    # above the default is (declared.py), so it counts only from an admin's own process.
    conn.latency_env = claimed_latency_sensitive(
        bool(msg.flags & HELLO_LATENCY_SENSITIVE),
        not msg.flags & HELLO_LATENCY_SENSITIVE or access.may_raise_itself(state, conn))
    if conn.latency_env:
        state.quotas.refresh(conn)
    conn.send(encode(Welcome(conn.id, VERSION, FEATURES)))
    # No line yet: what HELLO told is logged once, in the line of the client's first ATTACH
    # (registration costs one line), or in its disconnect's when it attaches nothing.


IDENTITY = "uid=%d client=%d priority=%d%s%s"  # HELLO's fields in a client's one line (identity())
COMMAND_LOGGED = 120                            # characters of its command line in that line
_WHERE = "device=%d gpu=%s%s capacity=%d%s"     # an ATTACH's device, in every attach line
_ATTACH = f"attach pid=%d {_WHERE}"
_FIRST_ATTACH = f"attach pid=%d {IDENTITY} {_WHERE}: %s"


def identity(conn: Conn) -> tuple:
    """IDENTITY's arguments: the client's uid, id, declared priority (and what it counts as),
    and whether it answers EVICT."""
    declared = conn.hello.priority
    return (conn.uid, conn.id, declared,
            "" if conn.priority == declared else f" (counts as {conn.priority})",
            " swap" if conn.swappable else "")


def on_attach(state: SchedulerState, conn: Conn, msg: Attach) -> None:
    """Attach the GPU msg.uuid names under ordinal msg.device (registry.attach: a UUID of bad syntax
    is a protocol error; an ordinal past limits.max_ordinals, or one GPU too many made up by this
    uid, is refused like a connection past the per-uid cap, with ERROR and
    the connection closed: a client left waiting for ATTACHED would hang, a closed one runs
    ungated). ATTACHED carries the scheduler's capacity, else the client's own report, which
    applies to that client only."""
    _require_hello(conn)
    registry = state.registry
    try:
        gpu = registry.attach(conn, msg.device, msg.uuid, msg.name)
    except Refused as e:
        state.warnings.warning(("attach", conn.uid), "refusing ATTACH of pid=%d uid=%d: %s; "
                               "closing its connection", conn.pid, conn.uid, e)
        conn.send(encode_error(str(e)))
        conn.close()
        return
    gpu.name = gpu.name or msg.name
    old = conn.devices.get(msg.device)
    conn.devices[msg.device] = gpu
    was_out = None
    if old is not None and old not in conn.devices.values():  # the ordinal now names another GPU
        conn.memory.pop(old.uuid, None)
        was_out = conn.swap.pop(old.uuid, None)
        conn.locks.pop(old, None)
        registry.detach(conn, old)
    registry.join(conn, gpu)  # its job (jobs.py) gets a seat on this GPU
    swap.carried_over(state, conn, was_out, gpu)
    state.quotas.attached(conn, gpu)
    metrics.attached(conn, gpu, registry.now(), gpu.stats.busy)
    capacity = gpu.capacity or msg.capacity or msg.physical_memory
    conn.send(encode(Attached(msg.device, 0, capacity)))
    latency.attached(state, conn, gpu, old)  # after ATTACHED: a QUEUE_BOUND names an attached device
    pinahead.attached(state, conn, gpu, msg.device, old)  # likewise
    where = (msg.device, gpu.label, f" ({gpu.uuid})" if gpu.index is not None else "", capacity,
             "" if gpu.capacity else " (its own)")
    if conn.announced:
        state.client_log.info(conn, _ATTACH, conn.pid, *where)
        return
    conn.announced = True  # its first: the line says who it is too
    state.client_log.info(conn, _FIRST_ATTACH, conn.pid, *identity(conn), *where,
                          conn.command[:COMMAND_LOGGED])


def on_req_lock(state: SchedulerState, conn: Conn, msg: LockRequest) -> None:
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        if move.holds_back(conn, gpu):  # it is being moved off gpu: granted there no more
            log.debug("request pid=%d gpu=%s held back: it is being moved", conn.pid, gpu.label)
            return
        log.debug("request pid=%d gpu=%s", conn.pid, gpu.label)
        metrics.requested(conn, gpu, state.registry.now())
        state.registry.request(conn, gpu)


def on_lock_released(state: SchedulerState, conn: Conn, msg: Released) -> None:
    _require_hello(conn)
    gpu = _attached_gpu(conn, msg.device)
    if gpu is None:
        return
    since = state.registry.gangs.held_since(conn, gpu)
    if since is None:
        log.debug("pid=%d released gpu %s it does not hold; ignored", conn.pid, gpu.label)
        return
    report = SwitchReport.from_us(msg.drain_us, msg.evict_us, msg.prefetch_us)  # clamped
    if lock_log.isEnabledFor(logging.INFO):  # --log-locks; its arguments cost on every release
        lock_log.info("release pid=%d gpu=%s reason=%s held=%.2fs drain=%.1fms evict=%.1fms "
                      "prefetch=%.1fms", conn.pid, gpu.label,
                      "idle" if msg.reason == ReleaseReason.IDLE else "dropped",
                      state.registry.now() - since, report.drain * 1e3, report.evict * 1e3,
                      report.prefetch * 1e3)
    metrics.released(conn, gpu, report, state.registry.now())
    state.registry.release(conn, gpu, report)


def on_mem_update(state: SchedulerState, conn: Conn, msg: MemUpdate) -> None:
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        memory = (msg.managed_bytes, msg.other_bytes)
        if conn.memory.get(gpu.uuid) == memory:
            return  # the library sends one with every lock request; unchanged, it is no event
        conn.memory[gpu.uuid] = memory
        state.registry.set_footprint(conn, gpu, msg.managed_bytes + msg.other_bytes)
        pinahead.footprint_changed(state, gpu)


def on_busy_update(state: SchedulerState, conn: Conn, msg: BusyUpdate) -> None:
    """The client's cumulative GPU busy time on a device: monotonic, and never more than the wall
    time that passed (metrics.busy); a report cut to it is logged, rate-limited per client."""
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        claimed = metrics.busy(conn, gpu, msg.busy_ns, state.registry.now(), gpu.stats.busy)
        if claimed is not None:
            conn.warnings.warning(("busy", gpu.uuid), "pid=%d gpu=%s claimed %.3fs of GPU busy "
                                  "time, more than the wall time since its last report; cut to "
                                  "it (%d such report(s) so far)", conn.pid, gpu.label, claimed,
                                  conn.locks[gpu].busy_clamps)


def on_busy_spans(state: SchedulerState, conn: Conn, msg: BusySpans) -> None:
    """Where the GPU time of the client's next BUSY_UPDATE was taken (metrics.busy_spans): spans
    that break the rules are dropped, and that report is shared out as one without them."""
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        if not metrics.busy_spans(conn, gpu, msg.intervals(), state.registry.now(), msg.open_ns):
            conn.warnings.warning(("busy_spans", gpu.uuid), "pid=%d gpu=%s sent busy spans out of "
                                  "order or outside the time since its last report; ignored",
                                  conn.pid, gpu.label)


def on_residency(state: SchedulerState, conn: Conn, msg: Residency) -> None:
    """Where the client's memory on a device is now (after an EVICT, a drop's eviction or the
    swap-in at a grant): swap.on_residency keeps it, counts the move and tells the policy. A
    REFUSED report (host memory for swap ran out) is logged, rate-limited per client."""
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        swap.on_residency(state, conn, gpu, msg)


def on_settings(state: SchedulerState, conn: Conn, msg: Settings) -> None:
    """The environment's quotas (quotas.py): answered with LIMITS, and from then on the client is
    sent LIMITS whenever what applies to it changes."""
    _require_hello(conn)
    state.quotas.settings(conn, msg)


def on_job(state: SchedulerState, conn: Conn, msg: Job) -> None:
    """The job the client belongs to (jobinfo.py), kept as conn.job_info. Once, and before the
    first ATTACH: a policy that places a job's members together must know the job before any of
    its GPUs is asked for, and a job that changed under a client's held locks would leave them
    counted for the wrong group."""
    _require_hello(conn)
    if conn.job_info is not None:
        raise ProtocolError("JOB sent twice")
    if conn.devices:  # ATTACH adds the device, and nothing takes it out while the connection lives
        raise ProtocolError("JOB after ATTACH")
    info, dropped = job_info(msg)
    conn.job_info = info
    if dropped:
        conn.warnings.warning("job", "pid=%d: JOB values out of range, taken as unknown: %s",
                              conn.pid, ", ".join(dropped))
    state.client_log.info(conn, "job pid=%d client=%d %s", conn.pid, conn.id, info.describe())


def on_burst(state: SchedulerState, conn: Conn, msg: Burst) -> None:
    """A latency-sensitive client's burst began or ended: the GPU's others are held meanwhile."""
    _require_hello(conn)
    if gpu := _attached_gpu(conn, msg.device):
        latency.burst(state, conn, gpu, bool(msg.active))


def on_suspend_ready(state: SchedulerState, conn: Conn, msg: SuspendReady) -> None:
    _require_hello(conn)
    suspend.on_ready(state, conn, msg.status)


def on_resume_req(state: SchedulerState, conn: Conn, msg: ResumeRequest) -> None:
    _require_hello(conn)
    if not rehome.moved_instead(state, conn):  # --move-suspended: restored where there is room
        suspend.wake(state, conn, "its application")


def on_ctl(state: SchedulerState, conn: Conn, msg: dict) -> None:
    """A reply built in steps (status) is built a slice at a time (slicer.Slicer), then written a
    piece a step (Conn.send_pieces); until it is written, nothing more is read from this
    connection, so its replies keep the order of its requests and one connection has at most one
    reply in the making."""
    conn.ctl = conn.hello is None
    reply = ops.start(state, conn, msg)
    if isinstance(reply, bytes):
        conn.send(reply)
        return
    conn.awaiting = True
    loop = asyncio.get_running_loop()
    urgent = bool(conn.admin)  # an admin's the more turns (conn.admin: ops.start asked is_admin)

    def written(_=None) -> None:
        conn.awaiting = False
        if not conn.closed:
            conn.resume()

    def built(pieces: list[bytes] | None) -> None:
        if conn.closed:
            conn.awaiting = False
            return
        if pieces is None:
            conn.send(encode_json(MessageType.CTL_REPLY, {"ok": False, "error": "internal error"}))
            written()
            return
        state.slicer.submit(loop, conn.send_pieces(pieces), written, urgent=urgent)
    state.slicer.submit(loop, reply, built, urgent=urgent)


HANDLERS = {
    MessageType.HELLO: on_hello,
    MessageType.ATTACH: on_attach,
    MessageType.REQ_LOCK: on_req_lock,
    MessageType.LOCK_RELEASED: on_lock_released,
    MessageType.MEM_UPDATE: on_mem_update,
    MessageType.BUSY_UPDATE: on_busy_update,
    MessageType.BUSY_SPANS: on_busy_spans,
    MessageType.RESIDENCY: on_residency,
    MessageType.SUSPEND_READY: on_suspend_ready,
    MessageType.RESUME_REQ: on_resume_req,
    MessageType.BURST: on_burst,
    MessageType.SETTINGS: on_settings,
    MessageType.JOB: on_job,
    MessageType.CTL_REQUEST: on_ctl,
}
