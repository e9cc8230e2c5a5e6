"""Latency-sensitive clients and the queue bound they impose on the other clients of their GPU.

A client is latency-sensitive when its effective quota says so (quotas.py: the environment's HELLO
flag as it counts, a pod annotation, a DRA claim or nvsharectl). While one is attached to a GPU,
every other client of that GPU keeps the work it has queued past its gate short."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState


def sensitive(conn: Conn) -> bool:
    return bool(conn.quota.latency_sensitive) and not conn.closed


def changed(state: SchedulerState, conn: Conn) -> None:
    """The client became latency-sensitive or stopped being: its GPUs' bounds follow."""
    for gpu in conn.gpus():
        refresh(state, gpu)


def refresh(state: SchedulerState, gpu: Gpu) -> None:
    """What the GPU's clients are told (the queue bound: added with the message that carries it)."""
