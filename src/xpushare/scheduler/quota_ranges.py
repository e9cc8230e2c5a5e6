"""What the three quotas accept as values, in one place: the compute limit, the compute share and the
memory limit that the control ops set_compute_limit, set_compute_share and set_memory_limit set.

The scheduler's control schema checks those ops' `value` with these kinds (control.py), and
nvsharectl checks its --set-compute-limit, --set-compute-share and --set-memory-limit flags with the
very same kinds before it sends anything (ctl.py), so the two cannot disagree about a range. The
module stays light on purpose: nvsharectl imports it, and it imports nothing of the running
scheduler.
"""

from __future__ import annotations

from ..protocol import Limits
from .ctlschema import Int, Number, unsigned_max

CLEAR = "none"  # the word that removes a limit

COMPUTE_LIMIT_MAX = 100  # percent of the GPU's time; a limit is above 0
COMPUTE_SHARE_MAX = 1_000_000  # a weight; a share is above 0
MEMORY_LIMIT_MAX = unsigned_max(Limits, "memory_limit")  # LIMITS tells the library in 64 bits

COMPUTE_LIMIT = Number(0, COMPUTE_LIMIT_MAX, "a percentage of the GPU's time above 0 and at most "
                       f'{COMPUTE_LIMIT_MAX}, or "{CLEAR}"', words=(CLEAR,))
COMPUTE_SHARE = Number(0, COMPUTE_SHARE_MAX, f"a positive number (a weight) up to {COMPUTE_SHARE_MAX}")
MEMORY_LIMIT = Int(1, MEMORY_LIMIT_MAX, f'a positive number of bytes, at most {MEMORY_LIMIT_MAX}, '
                   f'or "{CLEAR}"', words=(CLEAR,))
