"""What a process's declaration of itself counts for: the rule of `nice`.

A client declares its priority (HELLO, NVSHARE_PRIORITY) and compute share (SETTINGS,
NVSHARE_COMPUTE_SHARE) itself. Either may lower its claim on the GPU, and order a user's own
processes, but not raise it above the default: the arbiters compare clients of every user alike,
so a raise would be taken from other users. A priority above the default counts as the default
against other users and still orders the user's own waiters (owners.py). Shares are weights, so a
user's declared shares count in the ratio declared, scaled so that the largest is at most the
default (own_shares): 30 and 70 count as 0.43 and 1, and one process's 4 alone as 1. Raising needs a source
the cluster governs: an admin's nvsharectl, a pod annotation, or a declaration by an admin's own
process (root, the scheduler's uid, --admin-group). The shell decides `governed`; these say what
follows from it, for every such value in one place.
"""

from __future__ import annotations

from .model import DEFAULT_SHARE

DEFAULT_PRIORITY = 0


def claimed_priority(declared: int, governed: bool) -> int:
    """The priority the arbiters use for a declared one."""
    return declared if governed else min(declared, DEFAULT_PRIORITY)


def claimed_latency_sensitive(declared: bool, governed: bool) -> bool:
    """Whether a declared latency-sensitive flag counts. It asks every other client of the GPU to
    keep its queued work short (a cost to them, as a higher priority is), so like a raise of
    priority it counts only when governed; undeclared, it never counts."""
    return declared and governed


def own_shares(declared: dict) -> dict:
    """The compute shares one user's processes declared for themselves (none of them governed), as
    they count: in their ratio, divided by the largest when that is above the default."""
    scale = max(DEFAULT_SHARE, *declared.values()) if declared else DEFAULT_SHARE
    return {client: share / scale for client, share in declared.items()}


def raises(declared_priority: int = DEFAULT_PRIORITY, declared_share: float | None = None) -> bool:
    """Whether a declaration asks for more than the default (so whether `governed` matters)."""
    return declared_priority > DEFAULT_PRIORITY or (declared_share or 0) > DEFAULT_SHARE
