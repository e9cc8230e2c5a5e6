"""What the three quotas accept as values, in one place: the compute limit, the compute share and the
memory limit, however they are set.

The scheduler's control schema checks the `value` of the ops set_compute_limit, set_compute_share
and set_memory_limit with these kinds (control/ops.py); nvsharectl checks its --set-compute-limit,
--set-compute-share and --set-memory-limit flags with the very same kinds before it sends anything
(ctl.py); the pod annotations nvshare.com/gpu-compute-limit, -share and -memory-limit are checked
with them too (kubernetes/pod_settings.py). The library reads NVSHARE_COMPUTE_LIMIT and
NVSHARE_COMPUTE_SHARE in C (native/src/core/config.c), with the same bounds in the wire's units; a test
runs it at these edges (tests/interposer/test_quota_env_ranges.py). So no two ways of setting a
quota disagree about its range.

The bounds follow the wire: a compute limit travels in per mille of the GPU's time (LIMITS,
SETTINGS), so its finest step, 0.1 percent, is also its smallest value; a share travels in
thousandths (SETTINGS, 32 bits), so 0.001 is the smallest, and the largest fits with room to spare.
The module stays light on purpose: nvsharectl and the pod annotation parser import it, and it
imports nothing of the running scheduler.
"""

from __future__ import annotations

from .protocol import COMPUTE_LIMIT_SCALE, COMPUTE_SHARE_SCALE, Limits, Settings
from .ctlschema import Int, Number, unsigned_max

CLEAR = "none"  # the word that removes a limit

COMPUTE_LIMIT_MIN = 100 / COMPUTE_LIMIT_SCALE  # percent: one per mille, the wire's step (0.1)
COMPUTE_LIMIT_MAX = 100                        # percent of the GPU's time: all of it
COMPUTE_SHARE_MIN = 1 / COMPUTE_SHARE_SCALE    # a weight: one thousandth, the wire's step (0.001)
COMPUTE_SHARE_MAX = 1_000_000
MEMORY_LIMIT_MAX = unsigned_max(Limits, "memory_limit")  # LIMITS tells the library in 64 bits

if COMPUTE_SHARE_MAX * COMPUTE_SHARE_SCALE > unsigned_max(Settings, "compute_share"):
    raise AssertionError("the largest compute share does not fit SETTINGS")


def plain(number) -> str:
    """A bound as people write it: 0.1, 0.001, 100, 1000000 (no exponent, no trailing zeros)."""
    return f"{number:f}".rstrip("0").rstrip(".") if isinstance(number, float) else str(number)


# The ranges in words, for every text that says what is accepted (the library's warnings say the same).
COMPUTE_LIMIT_SPAN = f"from {plain(COMPUTE_LIMIT_MIN)} to {plain(COMPUTE_LIMIT_MAX)}"
COMPUTE_SHARE_SPAN = f"from {plain(COMPUTE_SHARE_MIN)} to {plain(COMPUTE_SHARE_MAX)}"

COMPUTE_LIMIT = Number(COMPUTE_LIMIT_MIN, COMPUTE_LIMIT_MAX,
                       f'a percentage of the GPU\'s time {COMPUTE_LIMIT_SPAN}, or "{CLEAR}"',
                       words=(CLEAR,))
COMPUTE_SHARE = Number(COMPUTE_SHARE_MIN, COMPUTE_SHARE_MAX, f"a number (a weight) {COMPUTE_SHARE_SPAN}")
MEMORY_LIMIT = Int(1, MEMORY_LIMIT_MAX, f'a positive number of bytes, at most {MEMORY_LIMIT_MAX}, '
                   f'or "{CLEAR}"', words=(CLEAR,))
