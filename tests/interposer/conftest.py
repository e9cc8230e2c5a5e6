"""Fixtures for the interposer suite: build the mock driver and test program once per run,
locate (or build) libnvshare.so, and give each test a private World (socket, logs, processes)."""

import fcntl
import hashlib
import os
import shutil

import pytest

from .fake_scheduler import RecordingScheduler
from testkit.build import BUILD, BuildError, native_library

from .harness import MOCK_SRC, artifacts_in, build_artifacts, new_world


@pytest.fixture(scope="session")
def artifacts():
    """Built once per run for every xdist worker (the first builds, the others find it): in
    build/tests-native/mock-<digest of tests/mock/, its folders included>, so an edit to the mock's
    sources builds afresh."""
    digest = hashlib.sha256(b"".join(str(p.relative_to(MOCK_SRC)).encode() + p.read_bytes()
                                     for p in sorted(MOCK_SRC.rglob("*")) if p.is_file())).hexdigest()
    out = BUILD / f"mock-{digest[:16]}"
    with open(BUILD / ".mock.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".built").exists():
            shutil.rmtree(out, ignore_errors=True)
            build_artifacts(out)
            (out / ".built").touch()
    return artifacts_in(out)


@pytest.fixture(scope="session")
def nvshare_lib():
    try:
        return native_library()  # built once per run (tests/conftest.py), or NVSHARE_LIBRARY
    except BuildError as e:
        pytest.fail(f"libnvshare.so is not available: {e}")


def _world(artifacts, library, request=None):
    w = new_world(artifacts, library)
    # A test of managed memory's paths (the backing kept for oversubscription): its apps run with
    # NVSHARE_BACKING=managed; every other test runs on the library's default backing.
    if request is not None and request.node.get_closest_marker("managed_backing"):
        w.base_env["NVSHARE_BACKING"] = "managed"
    yield w
    w.teardown()
    # shown by pytest only when the test failed
    for s in w.schedulers:
        print(f"--- {s.log_path.name}\n{s.log()}")
    for a in w.apps:
        print(f"--- pid {a.pid}: {' '.join(a.args[1:])}\nstdout: {a.lines}\nstderr: {a.stderr()}")
    if not os.environ.get("NVSHARE_TEST_KEEP"):
        shutil.rmtree(w.dir, ignore_errors=True)


@pytest.fixture
def world(artifacts, nvshare_lib, request):
    yield from _world(artifacts, nvshare_lib, request)


@pytest.fixture
def bare_world(artifacts):
    """A world without the interposer (apps must be started with preload=False)."""
    yield from _world(artifacts, None)


@pytest.fixture
def recorder(world):
    """A RecordingScheduler on the world's socket (instead of the real scheduler)."""
    rec = RecordingScheduler(world.socket)
    yield rec
    rec.close()
    print(f"--- recording scheduler: {rec.summary()}\nerrors: {rec.errors}")
