"""The one build under test, for every test and every process a test starts.

- Python: pytest's `pythonpath` (pyproject.toml) puts this checkout's src/, the repository root
  (testkit), tests/scheduler (the scheduler harness) and bench/ first on sys.path; the same list
  goes into PYTHONPATH here, so that subprocesses (schedulers, clients, fake workloads) import the
  same code. An installed xpushare is never what is tested.
- Native: libnvshare.so is built from native/ once per run (testkit.build; the xdist workers find
  it built) and named in NVSHARE_LIBRARY, which the library's users read (NVSHARE_LIBRARY set
  beforehand wins: the GPU machine tests its installed package).
"""

import os

import pytest

from testkit.build import BuildError, native_library


def pytest_configure(config):
    ours = [str(p) for p in config.getini("pythonpath")]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ours]
    os.environ["PYTHONPATH"] = os.pathsep.join(ours + inherited)
    try:
        os.environ["NVSHARE_LIBRARY"] = str(native_library())
    except BuildError as e:
        raise pytest.UsageError(f"libnvshare.so could not be built for the tests: {e}") from e
