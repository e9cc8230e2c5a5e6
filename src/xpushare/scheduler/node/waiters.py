"""Whether anyone waits for a GPU, as its latency-sensitive lock holders are told (WAITERS).

A library gives an idle lock up after NVSHARE_IDLE_RELEASE_MS so that a waiting client gets the
GPU (or the room an idle client's memory takes). Where nobody waits, that release buys nothing and
costs the holder's next burst a lock round trip before its first kernel: about a millisecond on
a latency-sensitive server's requests beside a training job in mode auto, where the two run
together and neither ever waits. So each latency-sensitive holder that offered HELLO_WAITERS is
told when the GPU's queue becomes empty (WAITERS 0: keep the lock while idle) and when someone
joins it (WAITERS 1: give an idle lock up as before, at once if it has been idle that long
already); one that stops being latency-sensitive is told 1. A holder never told anything (an
older library, or any other client) releases as it always did: its releases are what status,
suspension and the idle clients' swap-outs go by, and it has no request to keep fast.

With --suspend-idle every holder is told that others wait: a client keeping an idle lock would
never count as idle, and never be suspended.

Only changes are sent, once per holder per GPU, after the events of one step are carried out (so
a grant's LOCK_OK goes before its WAITERS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_WAITERS, Waiters
from ..policy.gangmodel import Seat

if TYPE_CHECKING:
    from .registry import Gpu


def waiting(gpu: Gpu, config) -> int:
    return int(bool(gpu.arbiter.waiting) or config.suspend_idle > 0)


def holders(gpu: Gpu):
    """The members granted the GPU of each seat that holds it. The arbiter's waiters are seats of
    other jobs: a member of a holding seat is granted with it, never queued behind it."""
    for seat in gpu.arbiter.live_holders():
        if isinstance(seat, Seat):
            yield from seat.holding


def tell_holders(gpu: Gpu, config) -> None:
    now_waiting = None
    for conn in holders(gpu):
        if conn.closed or conn.hello is None or not conn.hello.flags & HELLO_WAITERS:
            continue
        told = conn.waiters_told.get(gpu)
        if conn.quota.latency_sensitive:
            if now_waiting is None:
                now_waiting = waiting(gpu, config)
            want = now_waiting
        elif told is None:
            continue  # never told: it releases as it always did
        else:
            want = 1
        if told != want:
            conn.waiters_told[gpu] = want
            conn.send_per_device(gpu, lambda dev: Waiters(dev, want))
