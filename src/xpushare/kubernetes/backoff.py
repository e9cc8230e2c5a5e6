"""How the node agents wait before they try again after a failure: the first delay, doubled at each
failure in a row up to a cap, optionally cut by a random part (jitter: the agents of many nodes
do not retry in step against one API server), and nothing again after a success. The one rule of
the device plugin's registration, the pod watch and the health sources."""

from __future__ import annotations

import random
from typing import Callable


class Backoff:
    def __init__(self, first: float, cap: float, jitter: float = 0.0,
                 rand: Callable[[], float] = random.random):
        if not 0 < first <= cap or not 0 <= jitter < 1:
            raise ValueError(f"a backoff needs 0 < first <= cap and 0 <= jitter < 1, "
                             f"not {first}, {cap}, {jitter}")
        self.first, self.cap, self.jitter, self._rand = first, cap, jitter, rand
        self.failures = 0  # in a row

    def failed(self) -> float:
        """One more failure: how long to wait before the next try."""
        delay = min(self.cap, self.first * 2.0 ** min(self.failures, 64))
        self.failures += 1
        return delay * (1.0 - self.jitter * self._rand())

    def succeeded(self) -> None:
        self.failures = 0
