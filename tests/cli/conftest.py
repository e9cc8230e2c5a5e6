import shutil

import pytest

from sched_fixtures import scheduler, sockdir, start_scheduler  # noqa: F401
from sched_harness import SchedulerProcess, make_socket_dir


@pytest.fixture(scope="module")
def untouched_scheduler():
    """One serial scheduler (no NVML, TQ 30 s) for a module's usage errors: nvsharectl's parser
    refuses each before anything is sent (each test checks what it must find unchanged), so no
    test sees another's."""
    d = make_socket_dir()
    s = SchedulerProcess(d / "s.sock", ["--no-nvml", "--mode", "serial", "--tq", "30"]).start()
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)
