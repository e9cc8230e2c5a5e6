"""Benchmarks that do nothing useful, for the tests of bench/run_all.py's isolation and budget."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def ok(quick: bool, time_left: float | None) -> dict:
    return {"value": 1, "given": time_left, "was_quick": quick}


def fails(quick: bool, time_left: float | None) -> dict:
    raise ValueError("broken on purpose")


def not_a_dict(quick: bool, time_left: float | None):
    return [1, 2]


def crashes(quick: bool, time_left: float | None) -> dict:
    os._exit(7)


def hangs(quick: bool, time_left: float | None) -> dict:
    """Starts a long child in a session of its own (as the GPU harness does), then never returns."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path(os.environ["FAKE_BENCH_PIDFILE"]).write_text(str(child.pid))
    time.sleep(300)
    return {}
