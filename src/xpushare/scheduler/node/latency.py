"""Latency-sensitive clients and the queue bound they impose on the other clients of their GPU.

A client is latency-sensitive when its effective quota says so (quotas.py: the environment's HELLO
flag as it counts, a pod annotation, a DRA claim or nvsharectl). While one is attached to a GPU,
every other client of that GPU that offered HELLO_QUEUE_BOUND is sent QUEUE_BOUND with
--latency-queue-ms: its library then keeps the GPU time of the work it has queued past its gate
within that (the checkpoints' target, checkpoint.c), so that a request of the latency-sensitive client
waits for at most about that much work ahead of it, whether the two run together (auto mode) or
the other is preempted (its drain finishes that much). When the last latency-sensitive client of the
GPU leaves (or stops being one), the others are sent QUEUE_BOUND 0: their queues may grow again.

The bound shortens what is queued; the hold keeps anything new from joining it while a request
runs. A latency-sensitive client that offered HELLO_HOLD is sent BURSTS on for each of its GPUs and
reports the edges of its bursts (BURST: its first kernel launch after an idle point, and its next
idle point). While any latency-sensitive client of a GPU is in a burst, every other client of that
GPU that offered HELLO_HOLD is held: HOLD --latency-hold-ms closes its gate (it keeps the lock; no
drain, no switch) and HOLD 0 at the burst's end reopens it. The client reopens by itself when the
hold runs out, so a burst that never ends holds the others for at most that long each time, and a
client that is not latency-sensitive (by its effective quota) holds nobody: its BURST is ignored.

Only changes are sent: a client is told once per GPU per change, never on the lock round trip.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_HOLD, HELLO_QUEUE_BOUND, Bursts, Hold, QueueBound
from . import waiters
from .registry import lock_log

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

# The default of --latency-queue-ms. A preempting request waits for the holder's queued work
# (auto mode: for the kernels queued ahead of its own, and under a hold for what was queued when
# the hold came). 0.5 ms is the bound at which a small model's requests took as long as alone,
# where 2 ms left them measurably longer (docs/benchmarks.md, "Inference server beside a training
# job", also for what it costs the training). The other client's checkpoints are then an eighth of
# it apart in GPU time (NVS_RING of them in flight): a kernel longer than that fills a span by
# itself, so a training job of large kernels checkpoints every launch (an event record and query
# each) and queues only as many kernels as the bound holds (checkpoint.c's ring_depth), and one of small
# kernels every few. The bound holds only while a latency-sensitive client shares the GPU.
QUEUE_MS = 0.5
# The default of --latency-hold-ms: the longest one burst holds the others. A small model's request
# takes a few milliseconds; a long one (or a client that never goes idle) holds the others for this
# long, then they run beside it until its next burst.
HOLD_MS = 50.0


def sensitive(conn: Conn) -> bool:
    return bool(conn.quota.latency_sensitive) and not conn.closed


def attached(state: SchedulerState, conn: Conn, gpu: Gpu, old: Gpu | None = None) -> None:
    """ATTACH: a latency-sensitive client bounds the GPU's others; a new client of a GPU that has
    one is bounded. Nothing to do on a GPU without one (the usual case). old: the GPU the ordinal
    named before (a move, node/move.py), left if no ordinal names it any more."""
    if old is not None and old is not gpu and old not in conn.devices.values():
        _left(state, conn, old, gpu)
    if sensitive(conn):
        state.latency.setdefault(gpu, set()).add(conn)
        _tell_all(state, gpu)
        _bursts(state, conn, gpu, True)
    elif gpu in state.latency or conn.queue_bound.get(gpu):
        _tell(state, conn, gpu)


def _left(state: SchedulerState, conn: Conn, old: Gpu, gpu: Gpu) -> None:
    """conn's ordinal moved from old to gpu: it bounds and holds nobody on old any more, and what
    old's bound and bursts told its library (per ordinal) counts as told for gpu, so that only a
    change is sent."""
    if conn in state.latency.get(old, ()):
        _mark(state.latency, old, conn, False)
        _tell_all(state, old)
    if conn in state.bursting.get(old, ()):
        _burst_edge(state, conn, old, False)
    if old in state.held:
        state.held[old][1].discard(conn)
    if bound := conn.queue_bound.pop(old, 0):
        conn.queue_bound[gpu] = bound
    if old in conn.bursts_on:
        conn.bursts_on.discard(old)
        conn.bursts_on.add(gpu)


def changed(state: SchedulerState, conn: Conn) -> None:
    """The client became latency-sensitive or stopped being: its GPUs' bounds follow."""
    for gpu in conn.gpus():
        _mark(state.latency, gpu, conn, sensitive(conn))
        _tell_all(state, gpu)
        _bursts(state, conn, gpu, sensitive(conn))
        if not sensitive(conn):
            _burst_edge(state, conn, gpu, False)
        waiters.tell_holders(gpu, state.config)  # it keeps idle locks only while sensitive


def disconnected(state: SchedulerState, conn: Conn) -> None:
    for gpu in [g for g, who in state.latency.items() if conn in who]:
        _mark(state.latency, gpu, conn, False)
        _tell_all(state, gpu)
    for gpu in [g for g, who in state.bursting.items() if conn in who]:
        _burst_edge(state, conn, gpu, False)
    for _, who in state.held.values():
        who.discard(conn)


def burst(state: SchedulerState, conn: Conn, gpu: Gpu, active: bool) -> None:
    """BURST from conn on gpu: a latency-sensitive client's burst began or ended."""
    if not sensitive(conn):
        conn.warnings.warning(("burst", gpu.uuid), "pid=%d gpu=%s reported a burst but is not "
                              "latency-sensitive; ignored", conn.pid, gpu.label)
        return
    _burst_edge(state, conn, gpu, active)


def _burst_edge(state: SchedulerState, conn: Conn, gpu: Gpu, active: bool) -> None:
    was = gpu in state.bursting
    _mark(state.bursting, gpu, conn, active)
    if (gpu in state.bursting) == was:
        return
    if lock_log.isEnabledFor(logging.INFO):  # --log-locks: when the GPU's others were held
        lock_log.info("burst pid=%d gpu=%s %s", conn.pid, gpu.label, "on" if active else "off")
    if gpu in state.bursting:
        hold_us = round(state.config.latency_hold_ms * 1000)
        if not hold_us:
            return
        began, held = state.held.setdefault(gpu, (state.registry.now(), set()))
        for other in state.conns:
            if (other.hello is not None and not other.closed and other.hello.flags & HELLO_HOLD
                    and not sensitive(other) and gpu in other.devices.values()):
                other.send_per_device(gpu, lambda dev: Hold(dev, hold_us))
                held.add(other)
                other.held[0] += 1
    else:
        # what it held them for, as status shows it: at most the hold, which they end by themselves
        began, held = state.held.pop(gpu, (None, ()))
        took = 0.0 if began is None else min(state.registry.now() - began,
                                              state.config.latency_hold_ms / 1000)
        for other in held:
            other.held[1] += took
            if not other.closed:
                other.send_per_device(gpu, lambda dev: Hold(dev, 0))


def _bursts(state: SchedulerState, conn: Conn, gpu: Gpu, on: bool) -> None:
    """BURSTS to a latency-sensitive client that offered HELLO_HOLD (only changes)."""
    if conn.closed or not conn.hello.flags & HELLO_HOLD or (gpu in conn.bursts_on) == on:
        return
    if on:
        conn.bursts_on.add(gpu)
    else:
        conn.bursts_on.discard(gpu)
    conn.send_per_device(gpu, lambda dev: Bursts(dev, int(on)))


def _mark(table: dict, gpu: Gpu, conn: Conn, on: bool) -> None:
    """conn in or out of table[gpu] (state.latency, state.bursting); a GPU with nobody leaves it."""
    who = table.setdefault(gpu, set())
    if on:
        who.add(conn)
    else:
        who.discard(conn)
    if not who:
        del table[gpu]


def bound_us(state: SchedulerState) -> int:
    return max(1, round(state.config.latency_queue_ms * 1000))


def _tell_all(state: SchedulerState, gpu: Gpu) -> None:
    for conn in state.conns:
        if conn.hello is not None and gpu in conn.devices.values():
            _tell(state, conn, gpu)


def _tell(state: SchedulerState, conn: Conn, gpu: Gpu) -> None:
    """QUEUE_BOUND to conn for gpu when what applies to it changed: the bound while another client
    of the GPU is latency-sensitive, else 0."""
    if conn.closed or not conn.hello.flags & HELLO_QUEUE_BOUND:
        return
    want = bound_us(state) if any(o is not conn for o in state.latency.get(gpu, ())) else 0
    if conn.queue_bound.get(gpu, 0) == want:
        return
    if want:
        conn.queue_bound[gpu] = want
    else:
        conn.queue_bound.pop(gpu, None)
    conn.send_per_device(gpu, lambda dev: QueueBound(dev, want))
    state.client_log.info(conn, "queue bound pid=%d client=%d gpu=%s %s", conn.pid, conn.id,
                          gpu.label, f"{want} us" if want else "lifted")
