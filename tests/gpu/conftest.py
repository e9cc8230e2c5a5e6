"""Fixtures for the GPU tests: the library under test, schedulers on private sockets, and runners that
start programs natively or under libnvshare.so.

Every test here is marked `gpu` and skipped, at collection, where PyTorch or an NVIDIA GPU is missing
(CI), and all are skipped when the card has too little free memory (testkit.gpu.min_free_mib);
README.md in this directory says what they need. Nothing here initialises CUDA in the pytest process
itself: programs run in subprocesses.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit import gpu as harness

HERE = Path(__file__).resolve().parent


def _skip_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return ("needs PyTorch, which '.[test]' does not install: pip install '.[examples]' "
                "(tests/gpu/README.md)")
    if not harness.gpu_present():
        return "needs an NVIDIA GPU and its driver (nvidia-smi lists none)"
    return None


def pytest_configure(config: pytest.Config) -> None:
    # pytest-timeout registers this marker; without the plugin, register it so it is not unknown.
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): per-test time limit (pytest-timeout)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in item.path.parents]
    if not mine:
        return
    reason = _skip_reason()
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def gpu_headroom() -> None:
    """Run nothing on a GPU that someone else is using (GPU safety rule)."""
    problem = harness.gpu_headroom_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def nvshare_lib() -> Path:
    try:
        return harness.library_path()
    except (ImportError, FileNotFoundError) as e:
        pytest.fail(f"libnvshare.so not found ({e}); install the package "
                    f"(pip install --no-build-isolation --no-deps .) or set NVSHARE_LIBRARY")


@pytest.fixture
def scheduler_factory() -> Iterator[Callable[..., harness.Scheduler]]:
    """start(mode=..., tq=...) -> a running scheduler on a private socket; all stopped afterwards."""
    started: list[harness.Scheduler] = []

    def start(**kwargs) -> harness.Scheduler:
        started.append(harness.Scheduler(**kwargs))
        return started[-1]

    yield start
    for sched in started:
        sched.stop()


@pytest.fixture
def scheduler(scheduler_factory) -> harness.Scheduler:
    """A scheduler in mode `off`: every lock request is granted at once (what a lone job sees)."""
    return scheduler_factory(mode="off")


@pytest.fixture
def under_library(nvshare_lib: Path, scheduler: harness.Scheduler) -> Callable[..., dict[str, str]]:
    """env(**NVSHARE_or_other_vars) -> environment running a program under the library and `scheduler`."""

    def env(**extra: object) -> dict[str, str]:
        return harness.library_env(nvshare_lib, scheduler.socket, **extra)

    return env
