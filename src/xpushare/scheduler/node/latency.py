"""Latency-sensitive clients and the queue bound they impose on the other clients of their GPU.

A client is latency-sensitive when its effective quota says so (quotas.py: the environment's HELLO
flag as it counts, a pod annotation, a DRA claim or nvsharectl). While one is attached to a GPU,
every other client of that GPU that offered HELLO_QUEUE_BOUND is sent QUEUE_BOUND with
--latency-queue-ms: its library then keeps the GPU time of the work it has queued past its gate
within that (the checkpoints' target, gate.c), so that a request of the latency-sensitive client
waits for at most about that much work ahead of it, whether the two run together (auto mode) or
the other is preempted (its drain finishes that much). When the last latency-sensitive client of the
GPU leaves (or stops being one), the others are sent QUEUE_BOUND 0: their queues may grow again.

Only changes are sent: a client is told once per GPU per change, never on the lock round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_QUEUE_BOUND, QueueBound, encode

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

# The default of --latency-queue-ms. A preempting request waits for the holder's queued work
# (auto mode: for the kernels queued ahead of its own). 2 ms keeps that within 10% of the 10-20 ms
# a small model's request takes, while the other client's checkpoints stay a few hundred
# microseconds of GPU time apart (NVS_RING of them in flight), i.e. under a few thousand a second:
# an event record and query each, far below what a training step launches. Much lower, a kernel
# longer than the span's share of it (2 ms / 8) already fills a span, and the bound is met by the
# one-launch interval whatever its value.
QUEUE_MS = 2.0


def sensitive(conn: Conn) -> bool:
    return bool(conn.quota.latency_sensitive) and not conn.closed


def attached(state: SchedulerState, conn: Conn, gpu: Gpu) -> None:
    """ATTACH: a latency-sensitive client bounds the GPU's others; a new client of a GPU that has
    one is bounded. Nothing to do on a GPU without one (the usual case)."""
    if sensitive(conn):
        state.latency.setdefault(gpu, set()).add(conn)
        _tell_all(state, gpu)
    elif gpu in state.latency:
        _tell(state, conn, gpu)


def changed(state: SchedulerState, conn: Conn) -> None:
    """The client became latency-sensitive or stopped being: its GPUs' bounds follow."""
    for gpu in conn.gpus():
        _mark(state, gpu, conn, sensitive(conn))
        _tell_all(state, gpu)


def disconnected(state: SchedulerState, conn: Conn) -> None:
    for gpu in [g for g, who in state.latency.items() if conn in who]:
        _mark(state, gpu, conn, False)
        _tell_all(state, gpu)


def _mark(state: SchedulerState, gpu: Gpu, conn: Conn, on: bool) -> None:
    who = state.latency.setdefault(gpu, set())
    if on:
        who.add(conn)
    else:
        who.discard(conn)
    if not who:
        del state.latency[gpu]


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
    for dev, g in conn.devices.items():
        if g is gpu:
            conn.send(encode(QueueBound(dev, want)))
    state.client_log.info(conn, "queue bound pid=%d client=%d gpu=%s %s", conn.pid, conn.id,
                          gpu.label, f"{want} us" if want else "lifted")
