"""SIGTERM ends the scheduler promptly whatever it is connected to (issue 22, item 18): shutdown
waits on no peer and no thread (server.Server.shutdown).

The structural check runs shutdown in process with a pod watch that records how it is stopped and a
client that reads nothing. The process check stops a real scheduler whose pod watch is blocked in
a request to an API server that never answers (the kernel accepts its connection; nobody reads
it): the old shutdown joined that thread for 2 s; the bound here is half of that."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import time

import pytest

from sched_harness import SchedulerProcess
from xpushare.wire.protocol import MessageType, encode_json
from xpushare.scheduler.shell.server import Config, Server

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


class _Watch:
    def __init__(self):
        self.stopped_with = []

    def stop(self, *args, **kwargs):
        self.stopped_with.append((args, kwargs))


def test_shutdown_waits_on_no_thread_and_no_peer(sockdir):
    async def scenario():
        server = Server(Config(socket_path=sockdir / "s.sock", nvml=False))
        await server.startup()
        server.pod_watch = watch = _Watch()
        loop = asyncio.get_running_loop()
        peer = socket.socket(socket.AF_UNIX)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        peer.setblocking(False)
        await loop.sock_connect(peer, str(sockdir / "s.sock"))
        for _ in range(200):  # status requests whose replies it never reads
            await loop.sock_sendall(peer, encode_json(MessageType.CTL_REQUEST, {"op": "status"}))
            await asyncio.sleep(0)
        conns = list(server.state.conns)
        await server.shutdown()
        peer.close()
        return watch.stopped_with, [c.transport.is_closing() for c in conns]

    stopped_with, closing = asyncio.run(scenario())
    assert stopped_with == [((), {"timeout": 0})], "shutdown waited for the pod watch's threads"
    assert closing and all(closing)
    assert not (sockdir / "s.sock").exists()


def test_sigterm_does_not_wait_for_a_pod_watch_blocked_in_a_request(sockdir):
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    with socket.socket() as api:  # listens, never accepts: a request to it hangs
        api.bind(("127.0.0.1", 0))
        api.listen(8)
        (sockdir / "kubeconfig").write_text(KUBECONFIG.format(port=api.getsockname()[1]))
        sched = SchedulerProcess(sockdir / "s.sock", ("--no-nvml",), env={
            "NVSHARE_POD_ANNOTATIONS": "on", "NODE_NAME": "n",
            "NVSHARE_KUBECONFIG": str(sockdir / "kubeconfig")}).start()
        try:
            # the watch's request has connected: it waits for an answer that never comes
            assert select.select([api], [], [], 15)[0], "the pod watch made no request"
            started = time.monotonic()
            sched.proc.send_signal(signal.SIGTERM)
            rc = sched.proc.wait(timeout=30)
            took = time.monotonic() - started
        finally:
            sched.stop()
    assert rc == 0
    assert took < 1.0, f"exit took {took:.2f}s after SIGTERM: it waited for the pod watch"
    assert os.path.exists(sockdir / "s.sock") is False
