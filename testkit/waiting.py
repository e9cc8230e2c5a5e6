"""Waiting for a condition in tests: poll instead of fixed sleeps, so a loaded CI box only runs slower.

`poll` is the one polling loop of the test suites (tests/ and the harness in testkit/gpu.py). Tests
never assert that something did NOT happen by sleeping: they look for a later event that must come
after it (an ordering witness) and wait for that instead.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar, Union

T = TypeVar("T")


def poll(cond: Callable[[], T], timeout: float = 15.0, interval: float = 0.02,
         what: Union[str, Callable[[], str]] = "condition",
         abort: Callable[[], object] | None = None) -> T:
    """Return cond()'s first truthy value; AssertionError after `timeout` seconds.

    what: the thing waited for, or a callable building it when the wait fails (so the message shows
    what was seen last, not what was seen at the start).
    abort: checked after each false cond(); when it returns a truthy value the wait ends at once and
    poll returns None (e.g. a process the test waits on has died: its exit status says why).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if abort is not None and abort():
            return None  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for "
                                 f"{what() if callable(what) else what}")
        time.sleep(interval)


def stop_process(proc, timeout: float = 10.0, group: bool = False) -> int | None:
    """SIGTERM, then SIGKILL (to its process group with `group`: a process started with
    start_new_session=True) after `timeout` seconds; its exit status."""
    import os
    import signal
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
            proc.wait()
    return proc.returncode
