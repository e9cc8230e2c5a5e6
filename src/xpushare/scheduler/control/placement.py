"""Placement (the `place` control op, nvshare-run --gpus): which N GPUs of the node a job should use.
Pure: it ranks load records the caller gathered (control/ops.py) and knows nothing of connections or
arbiters, so the ranking is tested on its own (tests/scheduler/test_placement.py).

The ranking key, best first, compared in this order:
1. fits: the job's memory (`memory` bytes per GPU; 0 when not given) fits in the GPU's free memory
   (capacity minus used). A GPU whose clients already need more than its capacity does not fit even
   a job that names no memory: it is oversubscribed, and one more client makes it swap more. A GPU
   of unknown capacity fits only a job that names no memory: nothing says that more fits.
2. fewer waiters: clients queued for the lock are time the job would wait too.
3. less committed compute: the sum of the compute limits of the GPU's clients (a fraction of its
   time each; a client without a limit counts as the whole GPU, 1.0). Compute shares are left out:
   a share is a weight among the clients of one GPU, and says nothing that compares across GPUs.
4. less memory used (bytes).
5. the NVML index (a stable order: equal GPUs are taken lowest index first), then the UUID.
A GPU that is not known to be usable (healthy false: e.g. one a client made up, which NVML did not
report) is never chosen. Because the order is lexicographic, a GPU at least as good on every key and
better on one is always taken before a worse one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...wire.sizes import format_size

UNLIMITED = 1.0  # the compute a client without a compute limit commits: the whole GPU


class PlacementError(ValueError):
    """A placement that cannot be made (more GPUs asked for than are known); the text says why."""


@dataclass(frozen=True)
class GpuLoad:
    """What the scheduler knows of one GPU's load when a placement is asked for."""
    index: int | None    # NVML's index; None for a GPU NVML did not report
    uuid: str
    capacity: int        # bytes; 0 = unknown
    used: int            # bytes its attached clients take (footprints, contexts included)
    waiters: int         # clients queued for its lock
    holders: int         # clients holding its lock
    committed: float     # sum of its clients' compute limits (UNLIMITED for each without one)
    healthy: bool = True  # known and usable: only such GPUs are placed on

    @property
    def free(self) -> int | None:
        """Bytes left below the capacity (negative when oversubscribed); None: capacity unknown."""
        return self.capacity - self.used if self.capacity else None

    def fits(self, memory: int = 0) -> bool:
        free = self.free
        return memory == 0 if free is None else free >= memory

    def key(self, memory: int = 0) -> tuple:
        """The ranking key (module docstring): smaller is better."""
        return (not self.fits(memory), self.waiters, self.committed, self.used, *_in_order(self))


def rank(loads: list[GpuLoad], memory: int = 0) -> list[GpuLoad]:
    """The healthy GPUs, best first."""
    return sorted((g for g in loads if g.healthy), key=lambda g: g.key(memory))


def new_home(loads: list[GpuLoad], source: GpuLoad, need: int, mine: int) -> GpuLoad | None:
    """Where a client that needs `need` bytes (its memory and context) should go instead of
    `source`, whose load counts `mine` of them (its memory): None while source has the room, else
    the best of `loads` (GPUs of its chip type only: the caller's) that fits it, if any."""
    if source.free is None or source.free + mine >= need:
        return None
    fitting = [g for g in loads if g.uuid != source.uuid and g.fits(need) and g.free is not None]
    ranked = rank(fitting, need)
    return ranked[0] if ranked else None


def choose(loads: list[GpuLoad], count: int, memory: int = 0) -> list[GpuLoad]:
    """The `count` best GPUs, best first; PlacementError when fewer are known."""
    if count < 1:
        raise PlacementError(f"cannot place on {count} GPUs: ask for at least 1")
    ranked = rank(loads, memory)
    if count > len(ranked):
        known = ", ".join(_label(g) for g in sorted(ranked, key=_in_order)) or "none"
        raise PlacementError(f"asked for {count} GPU{'s' if count != 1 else ''}, but the scheduler "
                             f"knows {len(ranked)} it can place on ({known})")
    return ranked[:count]


def reason(g: GpuLoad, memory: int = 0) -> str:
    """One short line on why `g` ranks where it does: its values of the ranking key."""
    free = g.free
    if free is None:
        room = "capacity unknown"
    else:
        room = f"{format_size(max(free, 0))} free of {format_size(g.capacity)}"
        if free < 0:
            room += f" (oversubscribed by {format_size(-free)})"
    fit = "" if g.fits(memory) else ", does not fit " + (format_size(memory) if memory else "more")
    return (f"gpu {_label(g)}: {room}{fit}, {g.waiters} waiting, {g.holders} holding, "
            f"compute {g.committed:g} committed")


def _in_order(g: GpuLoad) -> tuple:
    """NVML's order, then GPUs without an index by UUID."""
    return (g.index is None, g.index or 0, g.uuid)


def _label(g: GpuLoad) -> str:
    return str(g.index) if g.index is not None else g.uuid
