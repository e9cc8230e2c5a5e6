"""Fixtures for the CPU tests of bench/: the benchmark modules on sys.path, and a real
nvshare-scheduler subprocess (no GPU: --no-nvml) for the protocol client."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
from bench.core.protoclient import children_can_import_xpushare  # noqa: E402


@pytest.fixture
def start_scheduler():
    """start_scheduler(mode="serial", tq=30.0, *extra_args) -> a running harness.Scheduler."""
    from bench.core.common import harness

    children_can_import_xpushare()
    started = []

    def start(mode: str = "serial", tq: float = 30.0, *extra: str):
        sched = harness.Scheduler(mode=mode, tq=tq, extra_args=("--no-nvml", *extra))
        started.append(sched)
        return sched

    yield start
    for sched in started:
        sched.stop()
