"""What a process's declaration of itself counts for: the rule of `nice`.

A client declares its priority (HELLO, NVSHARE_PRIORITY) and compute share (SETTINGS,
NVSHARE_COMPUTE_SHARE) itself. Either may lower its claim on the GPU, and so order a user's own
processes (lower those that can wait), but not raise it above the default: the arbiters compare
clients of every user alike, so a raise would be taken from other users. Raising needs a source
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


def claimed_share(declared: float | None, governed: bool) -> float | None:
    """The compute share the arbiters use for a declared one (None: the default)."""
    if governed or declared is None or declared <= DEFAULT_SHARE:
        return declared
    return None


def raises(declared_priority: int = DEFAULT_PRIORITY, declared_share: float | None = None) -> bool:
    """Whether a declaration asks for more than the default (so whether `governed` matters)."""
    return declared_priority > DEFAULT_PRIORITY or (declared_share or 0) > DEFAULT_SHARE
