"""GpuRegistry.apply in-process: every action the arbiter returns is carried out, even when one fails."""

import asyncio
import logging
import os
from pathlib import Path

import pytest

from ctl_state import FakeTransport
from sched_harness import GiB, uuid
from xpushare.wire.protocol import MessageType
from xpushare.scheduler.policy import Mode
from xpushare.scheduler.shell.connection import Conn
from xpushare.scheduler.node.registry import GpuRegistry
from xpushare.scheduler.node.state import Config


@pytest.fixture
def registry():
    loop = asyncio.new_event_loop()
    r = GpuRegistry(Config(socket_path=Path("/nonexistent/s.sock"), tq=30))
    r.start(loop)  # only its timers are used
    yield r
    loop.close()


def conn(cid, gpu, fail=False) -> Conn:
    c = Conn(cid, FakeTransport(fail), os.getpid(), os.getuid(), os.getgid())
    c.devices[0] = gpu
    return c


def test_a_failing_action_does_not_skip_the_others(registry, caplog):
    gpu = registry.add(uuid(0), 0, "Fake", GiB)
    holder, broken, good = conn(1, gpu), conn(2, gpu, fail=True), conn(3, gpu)
    for c in (holder, broken, good):
        registry.apply(gpu, gpu.arbiter.request, c)
    caplog.set_level(logging.INFO, "nvshare.scheduler")
    registry.apply(gpu, gpu.arbiter.set_mode, Mode.OFF)  # one call, two grants: broken's, then good's
    assert good.transport.frame_types() == [MessageType.LOCK_OK]
    assert "grant pid=" in caplog.text
    # broken could not be told it holds the GPU: its connection goes (which hands the lock on)
    assert broken.transport.closed
    assert "cannot carry out grant" in caplog.text


def test_the_timer_is_armed_even_when_an_action_fails(registry):
    gpu = registry.add(uuid(0), 0, "Fake", GiB)
    broken = conn(1, gpu, fail=True)
    registry.apply(gpu, gpu.arbiter.request, broken)
    assert broken.transport.closed
    assert gpu.timer is not None and gpu.timer_at == gpu.arbiter.next_deadline()
