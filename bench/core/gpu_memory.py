"""The GPU memory rules of the makespan and interactive benchmarks: the safety limits, auto admission's
arithmetic (the scheduler's policy constants) and the choice of a virtual capacity where one job fits
and two do not.

GPU safety (binding on the lent GPU machine): under libnvshare.so every cudaMalloc becomes managed
memory, and a card asked for more managed memory than it has can hang. Oversubscription is made with a
smaller virtual capacity (nvshare-scheduler --gpu-memory), never for real. The free-memory check before
GPU work is common.require_safe_gpu().
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.core.common import say
from xpushare.scheduler.policy import CLIENT_OVERHEAD, RESERVE_FRACTION

GIB = 1 << 30
MIB = 1 << 20
LIBRARY_TOTAL_LIMIT_GIB = 24.0  # all processes under the library together allocate at most this
CLIENT_VIRTUAL_CAPACITY = 16 * GIB  # NVSHARE_GPU_MEMORY of every job, >= the scheduler's --gpu-memory


def library_total_problem(footprints: Iterable[int], limit_gib: float = LIBRARY_TOTAL_LIMIT_GIB) -> str | None:
    """The processes under the library would allocate more than the safety limit in total."""
    total = sum(footprints)
    if total > limit_gib * GIB:
        return (f"the jobs under libnvshare.so would allocate {total / GIB:.1f} GiB together, over the "
                f"{limit_gib:g} GiB safety limit: make them smaller")
    return None


def budget_of(capacity: int, reserve: int | None = None) -> int:
    """What auto admission may hand out: capacity minus the reserve (default 5% of capacity)."""
    return capacity - (round(capacity * RESERVE_FRACTION) if reserve is None else reserve)


def counted(footprint: int, overhead: int = CLIENT_OVERHEAD) -> int:
    """A client's footprint as auto admission counts it: what it reported plus its context."""
    return footprint + overhead


def fits_together(footprints: list[int], budget: int, overhead: int = CLIENT_OVERHEAD) -> bool:
    return sum(counted(f, overhead) for f in footprints) <= budget


def separates(footprints: list[int], budget: int, overhead: int = CLIENT_OVERHEAD) -> bool:
    """Each job fits alone, all of them together do not."""
    return (max(counted(f, overhead) for f in footprints) <= budget
            and not fits_together(footprints, budget, overhead))


def separating_capacity(footprints: list[int], overhead: int = CLIENT_OVERHEAD,
                        reserve_fraction: float = RESERVE_FRACTION) -> int:
    """A capacity whose budget lies halfway between the largest job alone and all of them together
    (the widest margin for both conditions), rounded up to 64 MiB."""
    if len(footprints) < 2:
        raise ValueError("separating needs at least two jobs")
    sizes = [counted(f, overhead) for f in footprints]
    budget = (max(sizes) + sum(sizes)) / 2
    return math.ceil(budget / (1 - reserve_fraction) / (64 * MIB)) * 64 * MIB


def scheduler_status(sock: Path) -> dict | None:
    """`nvsharectl status --json` of the benchmark's scheduler; None if it cannot be had."""
    try:
        from xpushare.cli.client import CtlClient

        with CtlClient(sock) as client:
            reply = client.request("status")
    except Exception:  # diagnostics only: a benchmark goes on without them
        return None
    return reply if reply.get("ok") else None


def control(sock: Path, op: str, **fields: object) -> dict:
    """One control request to the benchmark's scheduler (set_tq, set_gpu_memory, ...); error if refused."""
    from xpushare.cli.client import CtlClient

    with CtlClient(sock) as client:
        reply = client.request(op, **fields)
    if not reply.get("ok"):
        raise RuntimeError(f"scheduler refused {op} {fields}: {reply.get('error')}")
    return reply


def footprints_in(status: dict | None, pids: Iterable[int]) -> dict[int, dict]:
    """pid -> {"bytes": managed + other, "gpu": uuid} for the clients the scheduler knows."""
    found: dict[int, dict] = {}
    wanted = set(pids)
    for client in (status or {}).get("clients", []):
        if client.get("pid") in wanted and client.get("gpus"):
            gpu = client["gpus"][0]
            found[client["pid"]] = {"bytes": int(gpu.get("managed_bytes", 0)) + int(gpu.get("other_bytes", 0)),
                                    "gpu": gpu.get("uuid")}
    return found


def gpu_budget(status: dict | None, uuid: str | None) -> int | None:
    for gpu in (status or {}).get("gpus", []):
        if gpu.get("uuid") == uuid and gpu.get("budget"):
            return int(gpu["budget"])
    return None


def ensure_separating(sock: Path, pids: list[int], capacity: int, prefix: str) -> dict:
    """Check, with the footprints the jobs reported, that one job fits the capacity and all together
    do not; if the estimate was wrong, set the capacity to one that separates them. Returns what was
    seen and done (for the results)."""
    status = scheduler_status(sock)
    seen = footprints_in(status, pids)
    check: dict[str, Any] = {"capacity": capacity, "footprints": {str(p): f["bytes"] for p, f in seen.items()}}
    if len(seen) < len(pids) or not all(f["bytes"] for f in seen.values()):
        check["note"] = "footprints not known to the scheduler: capacity left as estimated"
        return check
    sizes = [f["bytes"] for f in seen.values()]
    uuid = next(iter(seen.values()))["gpu"]
    budget = gpu_budget(status, uuid) or budget_of(capacity)
    check["budget"] = budget
    if separates(sizes, budget):
        check["separates"] = True
        return check
    better = separating_capacity(sizes)
    say(prefix, f"capacity {capacity / GIB:.2f} GiB does not separate footprints "
                f"{[round(s / GIB, 2) for s in sizes]} GiB: setting {better / GIB:.2f} GiB")
    control(sock, "set_gpu_memory", bytes=better, gpu=uuid)
    check.update(capacity=better, budget=budget_of(better), separates=separates(sizes, budget_of(better)),
                 adjusted_from=capacity)
    return check


def fit_check(sock: Path, pids: list[int], capacity: int) -> dict:
    """Whether the jobs' reported footprints fit together (mode auto should grant them all at once)."""
    status = scheduler_status(sock)
    seen = footprints_in(status, pids)
    check: dict[str, Any] = {"capacity": capacity, "footprints": {str(p): f["bytes"] for p, f in seen.items()}}
    if seen:
        uuid = next(iter(seen.values()))["gpu"]
        budget = gpu_budget(status, uuid) or budget_of(capacity)
        check.update(budget=budget, fit=fits_together([f["bytes"] for f in seen.values()], budget))
    return check
