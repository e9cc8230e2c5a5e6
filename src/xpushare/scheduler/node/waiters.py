"""Whether anyone waits for a GPU, as its lock holders are told (WAITERS).

A library gives an idle lock up after NVSHARE_IDLE_RELEASE_MS so that a waiting client gets the
GPU (or the room an idle client's memory takes). Where nobody waits, that release buys nothing and
costs the holder's next burst a lock round trip before its first kernel: about a millisecond on
a latency-sensitive server's requests beside a training job in mode auto, where the two run
together and neither ever waits. So each holder that offered HELLO_WAITERS is told when the GPU's
queue becomes empty (WAITERS 0: keep the lock while idle) and when someone joins it (WAITERS 1:
give an idle lock up as before, at once if it has been idle that long already). A holder never
told anything (an older library, or before its first grant here) releases as it always did.

With --suspend-idle every holder is told that others wait: a client keeping an idle lock would
never count as idle, and never be suspended.

Only changes are sent, once per holder per GPU, after the events of one step are carried out (so
a grant's LOCK_OK goes before its WAITERS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_WAITERS, Waiters, encode

if TYPE_CHECKING:
    from .registry import Gpu


def waiting(gpu: Gpu, config) -> int:
    return int(bool(gpu.arbiter.waiting) or config.suspend_idle > 0)


def tell_holders(gpu: Gpu, config) -> None:
    """The holders (the members granted the GPU of each seat that holds it) whose last WAITERS
    differs from what the GPU's queue says now are told. The arbiter's waiters are seats of other
    jobs: a member of a holding seat is granted with it, never queued behind it."""
    now_waiting = None
    for conn in (member for seat in gpu.arbiter.live_holders() for member in seat.holding):
        if conn.closed or conn.hello is None or not conn.hello.flags & HELLO_WAITERS:
            continue
        if now_waiting is None:
            now_waiting = waiting(gpu, config)
        if conn.waiters_told.get(gpu) != now_waiting:
            conn.waiters_told[gpu] = now_waiting
            conn.send(encode(Waiters(conn.ordinal(gpu), now_waiting)))
