"""What the scheduler and its clients agree on about scheduling: the modes, the quantum's range (it
travels in milliseconds as a u32) and the memory a CUDA context takes beyond what a client
allocates (the scheduler's admission, and the library's NVSHARE_CONTEXT_RESERVE default)."""

from __future__ import annotations

from enum import Enum

TQ_MIN = 0.001            # seconds: a quantum under 1 ms would be sent as 0 = "no quantum"
TQ_MAX = 4_294_967.0      # seconds: the largest whole second whose milliseconds fit a u32
# Measured context sizes: docs/benchmarks.md, "Measured facts".
CONTEXT_RESERVE = 768 * 2**20  # bytes
# The most a GPU may be counted as (--gpu-memory, set_gpu_memory): 4 PiB less 1 MiB. The room the
# scheduler asks a dropped holder to make within it travels in MiB as a u32 (DROP_LOCK's
# evict_mib), and a capacity this size is still exact as a double (the metrics, JSON readers) and
# as a Kubernetes quantity (64-bit signed). ATTACHED's u64 would carry more; nothing else would.
CAPACITY_MAX = 0xFFFFFFFF << 20  # bytes
CAPACITY_TEXT = "at most 4 PiB less 1 MiB (4503599626321920 bytes)"


def check_capacity(nbytes: int) -> int:
    """`nbytes` as a GPU's capacity; ValueError past CAPACITY_MAX."""
    if nbytes > CAPACITY_MAX:
        raise ValueError(f"invalid capacity {nbytes}: {CAPACITY_TEXT}")
    return nbytes


def check_tq(tq: float) -> float:
    """`tq` as a float; ValueError unless it is a number of seconds in [TQ_MIN, TQ_MAX]."""
    try:
        value = float(tq)
    except (TypeError, ValueError):
        raise ValueError(f"invalid quantum {tq!r}: a number of seconds is required") from None
    if not TQ_MIN <= value <= TQ_MAX:  # also refuses nan and inf
        raise ValueError(f"invalid quantum {tq!r}: it must lie between {TQ_MIN:g} and {TQ_MAX:.0f} "
                         "seconds (it is sent in milliseconds as a 32-bit number)")
    return value


class Mode(str, Enum):
    AUTO = "auto"      # memory-aware: run together what fits, take turns otherwise
    SERIAL = "serial"  # nvshare's anti-thrash on: one holder, priority then FCFS, time quantum
    OFF = "off"        # everyone runs at once, no quantum
