"""Waiting for a condition in tests: poll instead of fixed sleeps, so a loaded CI box only runs slower."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(cond: Callable[[], T], timeout: float = 15.0, interval: float = 0.02,
         what: str = "condition") -> T:
    """Return cond()'s first truthy value; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)
