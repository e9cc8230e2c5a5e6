"""Shared fixtures for tests/kubernetes: short socket directories, the real plugin process, a fake
API server."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from .fake_apiserver import FakeApiServer
from .helmtool import helm_or_skip
from .k8s_helpers import FakeKubelet, PluginProcess


@pytest.fixture(scope="session")
def helm():
    """helm (helmtool.py): skipped, with the reason, where it cannot be had."""
    return helm_or_skip()


@pytest.fixture
def api():
    """A fake API server (fake_apiserver.py) for the official kubernetes client's list and watch."""
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed; pip install '.[test]'")
    server = FakeApiServer().start()
    yield server
    server.stop()


@pytest.fixture
def short_dir():
    """A directory with a short path: Unix socket paths are limited to 107 bytes."""
    d = tempfile.mkdtemp(prefix="xpk-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_plugin(short_dir):
    """Start the real nvshare-device-plugin process (python -m xpushare.kubernetes.plugin)."""
    started = []

    def _start(*args: str) -> PluginProcess:
        p = PluginProcess(short_dir, list(args))
        started.append(p)
        return p

    yield _start
    for p in started:
        p.stop()


@pytest.fixture
def kubelet(short_dir):
    """A fake kubelet serving Registration on <short_dir>/dp/kubelet.sock."""
    plugin_dir = os.path.join(short_dir, "dp")
    os.makedirs(plugin_dir, exist_ok=True)
    k = FakeKubelet(plugin_dir).start()
    yield k
    k.stop()
