"""The GPUs the scheduler knows, each with its arbiter and its timer, and the one bridge to the policy.

Every event reaches a GPU's policy through GpuRegistry.apply(): it calls an Arbiter method with the
current time, carries out the actions it returns (LOCK_OK and DROP_LOCK frames, evictions, log
lines) and re-arms the GPU's timer for the arbiter's next deadline.

GPUs come from NVML at start and are never forgotten. A client may ATTACH a GPU NVML did not report
(no NVML, or a device it cannot see): that makes up a client-made GPU, if its UUID has the syntax of
one (gpus.valid_uuid) and its uid has made up fewer than limits.MAX_MADE_UP_GPUS_PER_UID that are
still known (root and the scheduler's uid exempt). A client-made GPU is forgotten, timer and all,
when its last client leaves; what --gpu-memory gives it by selector comes back with it, a live
nvsharectl setting for that one GPU does not. No client's report sets a GPU's capacity (Gpu.capacity).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable

from ...wire.protocol import (
    DROP_EVICT, DROP_GANG, EVICT_ROOM, GRANT_PREFETCH, DropLock, Grant, ProtocolError, encode,
    encode_error,
)
from ...wire.protocol import Evict as EvictFrame  # the EVICT message; policy.Evict closes a connection
from .. import policy
from . import limits, metrics, swap, waiters
from .gpus import uuid_key, valid_uuid
from .jobs import identify
from ..policy import Arbiter, Mode, check_tq
from ..policy.gang import Gangs, JobFormed, Outcome

log = logging.getLogger("nvshare.scheduler")
# Grants and releases, one line per lock cycle: off by default (nvshare-scheduler --log-locks), so
# that a busy GPU does not write a log line per message; drops and evictions stay in `log`.
lock_log = logging.getLogger("nvshare.scheduler.locks")


class Refused(Exception):
    """An ATTACH the scheduler will not serve; the text goes back as ERROR."""


class Gpu:
    """One GPU: what is known of it and its arbiter."""

    def __init__(self, uuid: str, index: int | None, name: str, memory_total: int,
                 arbiter: Arbiter, made_by: int | None = None):
        self.uuid, self.index, self.name, self.memory_total = uuid, index, name, memory_total
        self.capacity_override = 0  # --gpu-memory / set_gpu_memory; 0 = none
        self.made_by = made_by      # the uid whose client made it up; None: from NVML
        self.clients: set = set()   # the connections attached to a client-made GPU
        self.arbiter = arbiter
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None  # the deadline `timer` was armed for
        self.stats = metrics.GpuStats()     # its counts for the exporter, forgotten with it

    @property
    def capacity(self) -> int:
        """Own setting, else the NVML total; 0 = unknown. Never what a client reported: that
        applies to that client only (ATTACHED, docs/protocol.md)."""
        return self.capacity_override or self.memory_total

    @property
    def capacity_source(self) -> str:
        return "setting" if self.capacity_override else "nvml" if self.memory_total else "unknown"

    @property
    def label(self) -> str:
        return str(self.index) if self.index is not None else self.uuid

    def matches(self, sel) -> bool:
        if isinstance(sel, int) or (isinstance(sel, str) and sel.isdigit()):
            return self.index is not None and self.index == int(sel)
        return self.uuid.lower() == str(sel).lower()


class GpuRegistry:
    """GPUs by UUID, the defaults new ones get, and the bridge from events to their arbiters."""

    def __init__(self, config):
        self.config = config
        self.default_mode = Mode(config.mode)
        self.default_tq = None if config.tq is None else check_tq(config.tq)
        self.gpus: dict[str, Gpu] = {}            # by uuid_key
        self.made: Counter[int] = Counter()       # uid -> client-made GPUs it made, still known
        self.client_log = None                    # the state's ClientLog (clientlog.py)
        self.nvml_count = 0                       # GPUs NVML reported (never forgotten)
        self.gangs = Gangs(order=_gpu_order)      # every client is a member of one job
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gang_timer: asyncio.TimerHandle | None = None
        self._gang_timer_at: float | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serving begins: from now on events carry the loop's time and arm timers on it."""
        self._loop = loop

    def now(self) -> float:
        # Not loop.time(): uvloop's is libuv's cached, millisecond, coarse clock, which would
        # measure a sub-millisecond handoff as 0. Timers convert back to a delay (_arm).
        return time.monotonic()

    def get(self, uuid: str) -> Gpu | None:
        return self.gpus.get(uuid_key(uuid))

    def in_order(self) -> list[Gpu]:
        """NVML's order first, then GPUs learnt from clients."""
        return sorted(self.gpus.values(), key=lambda g: (g.index is None, g.index or 0))

    def add(self, uuid: str, index: int | None, name: str, memory_total: int,
            made_by: int | None = None) -> Gpu:
        gpu = Gpu(uuid, index, name, memory_total,
                  Arbiter(self.default_mode, self.default_tq, reserve=self.config.reserve,
                          reserve_fraction=self.config.reserve_fraction), made_by)
        gpu.capacity_override = next((size for sel, size in self.config.gpu_memory_for.items()
                                      if gpu.matches(sel)), self.config.gpu_memory)
        self.gpus[uuid_key(uuid)] = gpu
        if made_by is not None:
            self.made[made_by] += 1
        else:
            self.nvml_count += 1
        self.capacity_changed(gpu)
        self._log_gpu(made_by, "gpu %s: %s, %s, capacity %s, mode %s, tq %s",
                 gpu.label if made_by is None else f"(made up by a client of uid {made_by})", uuid,
                 name or "?", f"{gpu.capacity} bytes ({gpu.capacity_source})" if gpu.capacity
                 else "unknown", gpu.arbiter.mode.value, _tq_text(gpu.arbiter))
        return gpu

    def attach(self, conn, device: int, uuid: str, name: str) -> Gpu:
        """The GPU conn's ATTACH names, made up when it is not known. ProtocolError for a UUID
        without the syntax of one; Refused for an ordinal no process can have (limits.py), or when
        conn's uid has made up too many."""
        ordinals = limits.max_ordinals(self.nvml_count)
        if device >= ordinals:
            raise Refused(f"device ordinal {device}: a process has at most {ordinals} devices here "
                          f"({self.nvml_count} GPU(s) from NVML, and "
                          f"{limits.MAX_MADE_UP_GPUS_PER_UID} more it may name)")
        gpu = self.get(uuid)
        if gpu is None:
            if not valid_uuid(uuid):
                raise ProtocolError(f"ATTACH of {uuid[:48]!r}: not a GPU UUID "
                                    "(GPU- or MIG- and the 8-4-4-4-12 hex form)")
            cap = limits.MAX_MADE_UP_GPUS_PER_UID
            if self.made[conn.uid] >= cap and not conn.privileged:
                raise Refused(f"uid {conn.uid} already has {self.made[conn.uid]} GPUs the "
                              f"scheduler does not know attached (at most {cap}): not attaching "
                              f"{uuid}")
            gpu = self.add(uuid, None, name, 0, made_by=conn.uid)
        if gpu.made_by is not None:
            gpu.clients.add(conn)
        return gpu

    def _left(self, gpu: Gpu, conn) -> None:
        """`conn` is no longer attached to the client-made `gpu`: forget it with its last client."""
        gpu.clients.discard(conn)
        if gpu.clients or self.gpus.get(uuid_key(gpu.uuid)) is not gpu:
            return
        del self.gpus[uuid_key(gpu.uuid)]
        if gpu.timer is not None:
            gpu.timer.cancel()
            gpu.timer = None
        self.made[gpu.made_by] -= 1
        if not self.made[gpu.made_by]:
            del self.made[gpu.made_by]
        self._log_gpu(gpu.made_by, "gpu %s (made up by a client of uid %d): forgotten, its last "
                      "client left", gpu.uuid, gpu.made_by)

    def _log_gpu(self, made_by: int | None, fmt: str, *args) -> None:
        """A GPU's line: one a client made up comes and goes with that uid's clients, so its
        lines count against the uid's budget (clientlog.py)."""
        if made_by is None or self.client_log is None:
            log.info(fmt, *args)
        else:
            self.client_log.info(made_by, fmt, *args)

    def capacity_changed(self, gpu: Gpu) -> None:
        """Tell the arbiter the GPU's capacity (auto admission and eviction decisions use it)."""
        if self._loop is None:  # before serving: no clients, so no actions
            gpu.arbiter.set_capacity(gpu.capacity, 0.0)
        else:
            self.apply(gpu, gpu.arbiter.set_capacity, gpu.capacity)

    # -- the bridge: events in, actions out --------------------------------------------------
    def apply(self, gpu: Gpu, event: Callable[..., list[policy.Action]], *args) -> None:
        """Call `event` (a method of gpu.arbiter that names no client: tick, set_mode, set_tq,
        set_capacity) with the current time and carry out what it decides."""
        self.carry(self.gangs.on_gpu(gpu, event, *args, now=self.now()))

    def join(self, conn, gpu: Gpu) -> None:
        """conn uses gpu (its ATTACH): on its first, it joins its job (jobs.identify), and the
        policy learns whether it answers EVICT (HELLO's SWAP) before it has a seat to reclaim."""
        if conn not in self.gangs.job_of:
            ident = identify(conn)
            self.carry(self.gangs.join(conn, ident.key, ident.label, ident.size, conn.priority,
                                       self.now(), owner=conn.uid, own=conn.own_priority))
            if conn.swappable:
                self.set_swappable(conn, True)
        self.carry(self.gangs.attach(conn, gpu, self.now()))

    def detach(self, conn, gpu: Gpu) -> None:
        """conn no longer uses gpu (its ordinal was ATTACHed to another GPU)."""
        self.carry(self.gangs.detach(conn, gpu, self.now()))
        if gpu.made_by is not None:
            self._left(gpu, conn)

    def leave(self, conn) -> None:
        """conn is gone: its locks and requests go with it, a client-made GPU with its last
        client."""
        self.carry(self.gangs.leave(conn, self.now()))
        for gpu in conn.gpus():
            gpu.stats.busy.left(conn.id)
            if gpu.made_by is not None:
                self._left(gpu, conn)

    def request(self, conn, gpu: Gpu) -> None:
        self.carry(self.gangs.request(conn, gpu, self.now()))

    def release(self, conn, gpu: Gpu, report: policy.SwitchReport) -> None:
        self.carry(self.gangs.release(conn, gpu, self.now(), report))

    def set_footprint(self, conn, gpu: Gpu, nbytes: int) -> None:
        self.carry(self.gangs.set_footprint(conn, gpu, nbytes, self.now()))

    def set_swappable(self, conn, swappable: bool) -> None:
        self.carry(self.gangs.set_swappable(conn, swappable, self.now()))

    def residency(self, conn, gpu: Gpu, resident: int, refused: bool) -> None:
        """A RESIDENCY report: `resident` bytes of conn's memory are on gpu (cut to its
        footprint); refused: its swap-out left memory that could not move."""
        self.carry(self.gangs.residency(conn, gpu, resident, self.now(), refused=refused))

    def set_priority(self, conn, priority: int) -> None:
        if conn in self.gangs.job_of:
            self.carry(self.gangs.set_priority(conn, priority, self.now()))

    def set_share(self, conn, share: float | None) -> None:
        if conn in self.gangs.job_of:
            self.carry(self.gangs.set_share(conn, share, self.now()))

    def carry(self, outcome: Outcome) -> None:
        """Carry out what the policy decided, in order, and re-arm the timers.

        The policy has already recorded every action it returns, so each one is carried out even
        when another fails; a client that could not be told what was decided (e.g. a grant it
        never received) loses its connection, which hands its lock on instead of leaving it
        stuck. The timers are re-armed whatever happens."""
        now = self.now()
        try:
            for gpu, action in outcome.actions:
                try:
                    _carry_out(gpu, action, now, self.gangs, self.client_log)
                except Exception:  # a bug of ours: lose this client, never the other actions
                    log.exception("gpu=%s: cannot carry out %s; closing the client's connection",
                                  getattr(gpu, "label", "-"), type(action).__name__.lower())
                    if action.client is not None:
                        with contextlib.suppress(Exception):
                            action.client.close()
        finally:
            for gpu in outcome.gpus:
                if self.gpus.get(uuid_key(gpu.uuid)) is gpu:
                    self._arm(gpu)
                    waiters.tell_holders(gpu, self.config)
            self._arm_gangs()

    def _arm_gangs(self) -> None:
        """The timer of the first job that stops waiting for its missing members."""
        deadline = self.gangs.next_deadline()
        if deadline == self._gang_timer_at or self._loop is None:
            return  # the usual case: no job waits for members, and none did
        if self._gang_timer is not None:
            self._gang_timer.cancel()
            self._gang_timer = None
        self._gang_timer_at = deadline
        if deadline is not None:
            self._gang_timer = self._loop.call_later(max(0.0, deadline - self.now()),
                                                     self._fire_gangs)

    def _fire_gangs(self) -> None:
        self._gang_timer = self._gang_timer_at = None
        self.carry(self.gangs.tick(self.now()))

    def _arm(self, gpu: Gpu) -> None:
        """Have the GPU's timer fire by the arbiter's next deadline. A timer already armed for that
        deadline or an earlier one is left alone: firing early is only a tick (a step that finds
        nothing due decides nothing new) after which _fire arms the timer again. So a lone
        client's grants, each of which moves the deadline a quantum on, and its releases, which
        take the deadline away, cost no timer at all."""
        deadline = gpu.arbiter.next_deadline()
        if deadline is None:
            return
        if gpu.timer is not None:
            if gpu.timer_at <= deadline:
                return
            gpu.timer.cancel()
        gpu.timer_at = deadline
        gpu.timer = self._loop.call_later(max(0.0, deadline - self.now()), self._fire, gpu)

    def _fire(self, gpu: Gpu) -> None:
        # A fired timer is gone: _arm must arm a new one even for the same deadline (the loop may
        # run a timer a clock tick early, before the arbiter counts its deadline as passed).
        gpu.timer = None
        self.apply(gpu, gpu.arbiter.tick)


def _carry_out(gpu: Gpu, a: policy.Action, now: float, gangs: Gangs, client_log=None) -> None:
    """Turn one policy action into what the client is sent, what the log says and what the
    exporter counts. The lines of reclaims, which a client can make come again and again (by
    answering EVICT late, or by reconnecting), count against its uid's budget (clientlog.py)."""
    conn = a.client  # a connection.Conn
    if isinstance(a, JobFormed):
        job = a.job
        log.info("job %s: %s after %.1fs with %d member(s)%s", job.label,
                 "complete" if a.complete else "runs as it is", a.waited, len(job.members),
                 "" if a.complete else f" of {job.size} (the rest did not register in time)")
    elif isinstance(a, policy.Grant):
        conn.send(_grant_frame(conn.ordinal(gpu), int(round(a.quantum * 1000)),
                               GRANT_PREFETCH if a.prefetch else 0))
        metrics.granted(conn, gpu, a.prefetch, now)
        swap.granted(conn, gpu)
        if lock_log.isEnabledFor(logging.INFO):  # --log-locks; its f-string costs on every grant
            lock_log.info("grant pid=%d gpu=%s quantum=%s prefetch=%s", conn.pid, gpu.label,
                          f"{a.quantum:g}s" if a.quantum else "none", _yes(a.prefetch))
    elif isinstance(a, policy.Drop):
        flags = (DROP_EVICT if a.evict else 0) | (DROP_GANG if a.gang else 0)
        conn.send(encode(DropLock(conn.ordinal(gpu), int(a.reason), flags, a.evict_mib)))
        metrics.dropped(conn, gpu, a.reason, a.evict, now)
        log.info("drop pid=%d gpu=%s reason=%s evict=%s%s", conn.pid, gpu.label,
                 a.reason.name.lower(), _yes(a.evict),
                 f" room={a.evict_mib}MiB" if a.evict_mib else "")
    elif isinstance(a, policy.Overdue):
        log.warning("pid=%d gpu=%s has not released %.1fs after DROP_LOCK (still draining?)",
                    conn.pid, gpu.label, a.waited)
    elif isinstance(a, policy.Evict):
        # The arbiter has taken the lock away (or given up on a reclaimed client); the client
        # learns it by losing the connection (its library then runs ungated with a warning and
        # reconnects). A client sent EVICT that holds no lock was waited on for its RESIDENCY.
        stats = conn.locks.get(gpu)
        if swap.reclaim_pending(conn, gpu) and (stats is None or stats.granted is None):
            why, answer, asked = ": it did not answer EVICT", "RESIDENCY", "EVICT"
        else:
            why, answer, asked = " without LOCK_RELEASED", "LOCK_RELEASED", "DROP_LOCK"
        _say(client_log if asked == "EVICT" else None, conn, logging.WARNING,
             "evict pid=%d gpu=%s after %.1fs%s; closing its connection", conn.pid, gpu.label,
             a.waited, why)
        conn.send(encode_error(f"evicted from gpu {gpu.uuid}: no {answer} {a.waited:.1f}s after "
                               f"{asked}"))
        conn.close()
    elif isinstance(a, policy.Reclaim):
        resident = swap.client_resident(gangs, conn, gpu)
        swap.reclaim_sent(conn, gpu, now)
        conn.send(encode(EvictFrame(conn.ordinal(gpu), EVICT_ROOM)))
        _say(client_log, conn, logging.INFO, "reclaim pid=%d gpu=%s resident=%s", conn.pid,
             gpu.label, swap.gib(resident))
    elif isinstance(a, policy.Backoff):
        _say(client_log, conn, logging.WARNING, "pid=%d uid=%d gpu=%s kept a waiter waiting "
             "%.1fs (EVICT answered late or not at all, or DROP_LOCK not): the memory its uid's "
             "clients keep on this GPU while idle is not counted for %gs", conn.pid, conn.uid,
             gpu.label, a.waited, a.seconds)


def _say(client_log, conn, level: int, fmt: str, *args) -> None:
    """A line about `conn`, through its uid's budget when there is a client log."""
    if client_log is None:
        log.log(level, fmt, *args)
    else:
        client_log.log(level, conn, fmt, *args)


@functools.lru_cache(maxsize=1024)
def _grant_frame(device: int, quantum_ms: int, flags: int) -> bytes:
    """LOCK_OK's bytes: few distinct ones are ever sent (a quantum changes seldom), and each is
    built once."""
    return encode(Grant(device, quantum_ms, flags))


def _gpu_order(gpu: Gpu):
    """The global order in which a job acquires its GPUs (gang.py): NVML's, then client-made
    GPUs by UUID."""
    return (gpu.index is None, gpu.index or 0, gpu.uuid)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _tq_text(arb: Arbiter) -> str:
    return f"{arb.tq:g}s" + ("" if arb.tq_explicit is not None else " (dynamic)")
