"""What the registration path does (connect, HELLO, ATTACH), counted in-process: a burst of 1000
registrations became slower since 2026-11-23 with work added to it that most clients do not need.
A process in no pod costs no cgroup parsing, an ATTACH without a compute share makes no share
event in the policy, and a registration writes one log line."""

import asyncio
import os
import socket

import pytest

from ctl_state import FakeTransport
from sched_harness import GiB, uuid
from xpushare.kubernetes import podidentity
from xpushare.wire.protocol import HELLO_SWAP, Attach, Hello, encode
from xpushare.scheduler.shell.connection import Connection
from xpushare.kubernetes.pod_lookup import POD_IDENTITY_ROOT_ENV, PodLookup
from xpushare.scheduler.policy.gang import Gangs
from xpushare.scheduler.node.gpus import GpuInfo
from xpushare.scheduler.node.state import Config, SchedulerState


class SocketTransport(FakeTransport):
    def __init__(self, sock):
        super().__init__()
        self.sock = sock

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None


def _register(state: SchedulerState, n: int) -> None:
    async def run():
        state.registry.start(asyncio.get_running_loop())
        for _ in range(n):
            a, b = socket.socketpair(socket.AF_UNIX)
            conn = Connection(state)
            conn.connection_made(SocketTransport(a))
            conn.data_received(encode(Hello(0, 0, "", "")) +
                               encode(Attach(0, 0, uuid(0), "GPU", GiB, GiB)))
            assert conn.conn.devices
            conn.connection_lost(None)
            a.close()
            b.close()
    asyncio.run(run())


@pytest.fixture
def counted(monkeypatch):
    calls = {"pod lookups": 0, "cgroup lines": 0, "share events": 0}
    parse, set_share, lookup = podidentity.parse_cgroup_path, Gangs.set_share, podidentity.pod_identity

    def lookup_counted(*args, **kw):
        calls["pod lookups"] += 1
        return lookup(*args, **kw)

    def parse_counted(path):
        calls["cgroup lines"] += 1
        return parse(path)

    def set_share_counted(self, *args, **kw):
        calls["share events"] += 1
        return set_share(self, *args, **kw)
    monkeypatch.setattr(podidentity, "parse_cgroup_path", parse_counted)
    monkeypatch.setattr(podidentity, "pod_identity", lookup_counted)
    monkeypatch.setattr(Gangs, "set_share", set_share_counted)
    return calls


def test_a_registration_outside_any_pod_parses_no_cgroup_and_makes_no_share_event(counted, tmp_path):
    with open(f"/proc/{os.getpid()}/cgroup") as f:
        assert "kubepods" not in f.read()  # this test process is in no pod
    # A host that keeps pods' logs (here, the test seam's root): the cgroup is read, not parsed.
    (tmp_path / "proc").symlink_to("/proc")
    state = SchedulerState(Config(socket_path="/nonexistent/s.sock"))
    state.pods = PodLookup({POD_IDENTITY_ROOT_ENV: str(tmp_path)})
    _register(state, 20)
    assert counted == {"pod lookups": 20, "cgroup lines": 0, "share events": 0}


@pytest.mark.skipif(os.path.isdir("/var/log/pods"), reason="this host keeps pods' logs")
def test_a_host_without_pods_looks_up_no_pod(counted):
    state = SchedulerState(Config(socket_path="/nonexistent/s.sock"))
    _register(state, 20)
    assert counted == {"pod lookups": 0, "cgroup lines": 0, "share events": 0}


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nvshare.scheduler"]


def test_a_registration_logs_one_line_that_says_who_the_client_is(caplog):
    """HELLO and ATTACH write one line, which says what HELLO told (uid, priority, swap, the
    command line) with where the client attached; a second device's ATTACH writes a short one."""
    gpus = [GpuInfo(i, uuid(i), "GPU", 16 * GiB) for i in (0, 1)]  # as NVML reports them
    state = SchedulerState(Config(socket_path="/nonexistent/s.sock"), gpus)
    caplog.set_level("INFO", logger="nvshare.scheduler")

    async def run():
        state.registry.start(asyncio.get_running_loop())
        a, b = socket.socketpair(socket.AF_UNIX)
        with a, b:
            conn = Connection(state)
            conn.connection_made(SocketTransport(a))
            conn.data_received(encode(Hello(HELLO_SWAP, 3, "", "")))
            assert _lines(caplog) == []
            conn.data_received(encode(Attach(0, 0, uuid(0), "GPU", GiB, GiB)))
            (line,) = _lines(caplog)
            me, cid = os.getpid(), conn.conn.id
            assert line.startswith(f"attach pid={me} uid={os.getuid()} client={cid} priority=3 "
                                   f"swap device=0 gpu=0 ({uuid(0)}) capacity={16 * GiB}: ")
            assert line.endswith(conn.conn.command[:120]) and conn.conn.command
            conn.data_received(encode(Attach(1, 0, uuid(1), "GPU", GiB, GiB)))
            assert _lines(caplog)[1:] == [f"attach pid={me} device=1 gpu=1 ({uuid(1)}) "
                                          f"capacity={16 * GiB}"]
            conn.connection_lost(None)
            assert _lines(caplog)[2:] == [f"disconnect pid={me} client={cid}"]
    asyncio.run(run())


def test_a_client_that_attaches_nothing_is_named_in_its_disconnect_line(caplog):
    caplog.set_level("INFO", logger="nvshare.scheduler")
    state = SchedulerState(Config(socket_path="/nonexistent/s.sock"))

    async def run():
        a, b = socket.socketpair(socket.AF_UNIX)
        with a, b:
            conn = Connection(state)
            conn.connection_made(SocketTransport(a))
            conn.data_received(encode(Hello(0, 0, "", "")))
            conn.connection_lost(None)
            (line,) = _lines(caplog)
            assert line == (f"disconnect pid={os.getpid()} uid={os.getuid()} client={conn.conn.id} "
                            f"priority=0, attached no GPU: {conn.conn.command[:120]}")
    asyncio.run(run())
