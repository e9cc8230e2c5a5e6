"""The one build under test, for every test and every process a test starts.

- Python: pytest's `pythonpath` (pyproject.toml) puts this checkout's src/, the repository root
  (testkit, the bench package) and tests/scheduler (the scheduler harness) first on sys.path; the
  same list goes into PYTHONPATH here, so that subprocesses (schedulers, clients, fake workloads)
  import the same code. An installed xpushare is never what is tested.
- Native: libnvshare.so is built from native/ once per run (testkit.build; the xdist workers find
  it built) and named in NVSHARE_LIBRARY, which the library's users read (NVSHARE_LIBRARY set
  beforehand wins: the GPU machine tests its installed package).
- Bytecode: compiled once here, before the workers start, for every process after (testkit.bytecode).
"""

import fcntl
import os

import pytest

from testkit.build import BUILD, BuildError, native_library
from testkit.bytecode import compile_tree, write_assert_rewrites

EXCLUSIVE_LOCK = BUILD / ".exclusive"
TURNSTILE = BUILD / ".turnstile"


def pytest_configure(config):
    BUILD.mkdir(parents=True, exist_ok=True)
    ours = [str(p) for p in config.getini("pythonpath")]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ours]
    os.environ["PYTHONPATH"] = os.pathsep.join(ours + inherited)
    try:
        os.environ["NVSHARE_LIBRARY"] = str(native_library())
    except BuildError as e:
        raise pytest.UsageError(f"libnvshare.so could not be built for the tests: {e}") from e
    if not hasattr(config, "workerinput"):  # the main process, before any xdist worker starts
        compile_tree()
        write_assert_rewrites(config)


def pytest_sessionstart(session):
    # The runner's terminal is not the tests' (pytest-xdist's workers get COLUMNS=80): a command a
    # test runs renders at the width the test gives it, or at the default for a pipe.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def _is_exclusive(item) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


def pytest_collection_modifyitems(session, config, items):
    # The exclusive tests first, in their order: pytest-xdist hands each worker its first chunk of
    # consecutive tests (a quarter of its share), so one worker runs them all back to back at the
    # start, and the machine is drained for them once, while nothing long runs yet; scattered
    # through the run they were drained for several times, each drain waiting out the longest
    # test then running on the other workers.
    items[:] = [i for i in items if _is_exclusive(i)] + [i for i in items if not _is_exclusive(i)]


# This worker's share of the machine while it holds one: the shared lock for one test, or the
# turnstile and the lock while it runs exclusive tests back to back (pytest-xdist hands a worker
# tests in chunks in collection order, so the machine is drained for a run of them once).
_held = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Tests marked `exclusive` judge timing against the wall clock (a mock GPU's kernels, token
    buckets, latencies): they run with the machine to themselves, the parallel workers' other
    tests waiting. Every other test holds the main lock shared, an exclusive one holds it alone;
    each passes a turnstile first, which an exclusive test keeps while it waits and runs, so that
    no new test starts meanwhile (flock prefers no one: an exclusive test waited out its timeout
    while three workers took turns holding the shared lock). The share is taken before the test's
    fixtures of every scope are set up and given up after they are torn down
    (pytest_runtest_teardown below): another worker's module scheduler or session build waits too.
    An exclusive test followed by another keeps both for it."""
    if not _held:
        exclusive = _is_exclusive(item)
        turnstile, lock = open(TURNSTILE, "a"), open(EXCLUSIVE_LOCK, "a")
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if exclusive:
            _held.extend((turnstile, lock))
        else:
            turnstile.close()  # closing the file gives its flock up
            _held.append(lock)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if _held and not (_is_exclusive(item) and _is_exclusive(nextitem)):
        for f in _held:
            f.close()
        _held.clear()
