"""pytest fixtures around sched_harness, shared by tests/scheduler and tests/cli."""

import shutil

import pytest

from sched_harness import SchedulerProcess, make_socket_dir


@pytest.fixture
def sockdir():
    """A fresh directory under /tmp that other uids can traverse (pytest's tmp_path is 0700)."""
    d = make_socket_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_scheduler(sockdir):
    """start_scheduler(*args, nvml=None, name="s.sock", env=None) -> a running SchedulerProcess."""
    procs = []

    def start(*args, nvml=None, name="s.sock", env=None):
        p = SchedulerProcess(sockdir / name, args, env=env, nvml=nvml)
        procs.append(p)
        return p.start()

    yield start
    for p in procs:
        p.stop()


@pytest.fixture
def scheduler(start_scheduler):
    """A serial scheduler without NVML, TQ 30 s."""
    return start_scheduler("--no-nvml", "--mode", "serial", "--tq", "30")
