"""Host copies pinned ahead of a foreseen swap-out: which clients are told PREPARE_SWAP on or off.

A client's first swap-out of device memory its library maps itself has no pinned host copy yet:
the library pins one while the scheduler waits (native/src/swap/swapcold.c), far slower than the
bus; every later swap-out finds it pinned and kept, and copies at the speed of the bus. A library
that offered HELLO_PIN_AHEAD pins those host copies in the background when told that a swap-out of
its memory on a GPU is likely soon (PREPARE_SWAP on), so the scheduler tells it as soon as one can
be foreseen: a second client shares the GPU, and what their memory together may soon take passes
a share of the GPU's budget (likely(), the rule). Off when that no longer holds; the library
keeps what it pinned (the next swap-out uses it).

likely() is a pure function of what is known of the GPU's clients; refresh() applies it to one GPU
after an event that may change its answer (an ATTACH, a footprint that changed, a disconnect, a mode
or capacity set, the end of a newcomer's NEWCOMER_S) and tells each client of the GPU that offered
HELLO_PIN_AHEAD what changed for it: only changes, once per client per GPU per change, never on the
lock round trip. A GPU's clients are indexed here (state.pin_clients), so an event costs O(k) for
the k clients of its GPU. With --no-pin-ahead nobody is told anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...wire.protocol import HELLO_PIN_AHEAD, PrepareSwap, encode
from ..policy import Mode
from . import swap

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

lock_log = logging.getLogger("nvshare.scheduler.locks")  # --log-locks: a line per change

# On above this share of the GPU's budget (its capacity less the reserve), off again below
# OFF_FRACTION. Swaps begin only past the budget itself, but by then the swap-out is being asked
# for: what the others still allocate before it comes must cover the pinning, which runs at a
# fraction of the bus (a quarter of it, or less, per process). From three quarters on, the last
# quarter of the budget is left to allocate: a newcomer that fills it at a few GB/s (a model read
# from disk) takes longer than pinning what is resident. The lower off share keeps a footprint
# that hovers around the line from turning pinning on and off at every report.
ON_FRACTION = 0.75
OFF_FRACTION = 0.6
# How long after its ATTACH a client that reported no memory yet counts as the largest of the
# others. A program allocates within a second or so of creating its context, and its first
# MEM_UPDATE follows within 100 ms (every lock request comes after one); one attached this long
# with nothing reported is idle (a notebook that made a context and waits), and counting it as the
# largest would keep the others' host copies pinned for as long as it stays.
NEWCOMER_S = 30.0


def likely(was_on: bool, footprints: Sequence[int | None], budget: int | None, overhead: int,
           mode: Mode) -> bool:
    """Whether a swap-out of the GPU's clients' memory is likely soon: at least two clients, and
    their demand past ON_FRACTION of the budget (past OFF_FRACTION while it was on already).

    footprints: each attached client's, as it reported it (MEM_UPDATE: resident or swapped out, it
    comes back at the client's grant), None for a newcomer that reported nothing yet; overhead:
    bytes per client beyond it (its context, as admission counts it); budget None or 0: capacity
    unknown, nothing is foreseen. A newcomer (its ATTACH comes before its allocations) counts as
    the largest of the others, its likeliest size: in a second or so it has allocated, and by
    then the residents' copies must be pinned. A client that reported 0 bytes counts as 0. The
    same rule serves every mode that swaps: in serial every switch swaps once the clients do not
    fit together, in auto every switch to a client that does not fit beside the others does;
    mode off never swaps."""
    if mode is Mode.OFF or not budget or len(footprints) < 2:
        return False
    largest = max((f for f in footprints if f is not None), default=0)
    demand = sum(largest if f is None else f for f in footprints) + overhead * len(footprints)
    return demand > (OFF_FRACTION if was_on else ON_FRACTION) * budget


# -- events ----------------------------------------------------------------------------------------
def attached(state: SchedulerState, conn: Conn, gpu: Gpu, dev: int, old: Gpu | None) -> None:
    """ATTACH of gpu under ordinal dev (after ATTACHED); old: the GPU that ordinal named before
    (None, or gpu itself: a repeat)."""
    moved = old is not None and old is not gpu
    was_told = moved and old in conn.pin_ahead
    if moved and old not in conn.devices.values():  # left: under no ordinal any more
        conn.pin_ahead.discard(old)
        _leave(state, conn, old)
    clients = state.pin_clients.setdefault(gpu, {})
    if conn not in clients:  # a repeat ATTACH does not make it new again
        clients[conn] = True
        asyncio.get_running_loop().call_later(state.config.pin_newcomer_s, _not_new, state, gpu, conn)
    refresh(state, gpu)
    if was_told and gpu not in conn.pin_ahead and _offered(conn):
        conn.send(encode(PrepareSwap(dev, 0)))  # the ordinal's last word was old's on


def footprint_changed(state: SchedulerState, gpu: Gpu) -> None:
    refresh(state, gpu)


def disconnected(state: SchedulerState, conn: Conn) -> None:
    for gpu in conn.gpus():
        _leave(state, conn, gpu)


def gpu_changed(state: SchedulerState, gpu: Gpu) -> None:
    """A mode or capacity set (nvsharectl)."""
    refresh(state, gpu)


def _not_new(state: SchedulerState, gpu: Gpu, conn: Conn) -> None:
    """NEWCOMER_S after its ATTACH: what it reported is what it counts (nothing: 0)."""
    clients = state.pin_clients.get(gpu, {})
    if clients.get(conn):
        clients[conn] = False
        refresh(state, gpu)


def _leave(state: SchedulerState, conn: Conn, gpu: Gpu) -> None:
    clients = state.pin_clients.get(gpu)
    if clients is None or conn not in clients:
        return
    del clients[conn]
    if not clients:
        del state.pin_clients[gpu]
    refresh(state, gpu)


def refresh(state: SchedulerState, gpu: Gpu) -> None:
    """Apply likely() to gpu and tell its clients what changed for them."""
    if not state.config.pin_ahead:
        return
    clients = state.pin_clients.get(gpu, {})
    arb = gpu.arbiter
    was = gpu in state.pin_on
    footprints = [None if new and gpu.uuid not in c.memory else swap.footprint(c, gpu)
                  for c, new in clients.items()]
    on = likely(was, footprints, arb.budget, arb.client_overhead, arb.mode)
    if on:
        state.pin_on.add(gpu)
    else:
        state.pin_on.discard(gpu)
    for conn in clients:
        _tell(conn, gpu, on)


def _offered(conn: Conn) -> bool:
    return not conn.closed and conn.hello is not None and bool(conn.hello.flags & HELLO_PIN_AHEAD)


def _tell(conn: Conn, gpu: Gpu, on: bool) -> None:
    if not _offered(conn) or (gpu in conn.pin_ahead) == on:
        return
    if on:
        conn.pin_ahead.add(gpu)
    else:
        conn.pin_ahead.discard(gpu)
    conn.send_per_device(gpu, lambda dev: PrepareSwap(dev, int(on)))
    if lock_log.isEnabledFor(logging.INFO):
        lock_log.info("prepare-swap pid=%d gpu=%s %s", conn.pid, gpu.label, "on" if on else "off")
