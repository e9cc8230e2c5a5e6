"""The scheduler's loop is not held by the collector scanning its own code: a full collection
during a fuzzing run held the loop 5-6 ms each time it ran, most of it over objects that live as
long as the daemon (modules, classes, functions). Server.startup freezes what exists once it
serves, so a full collection scans only what was made since. And a connection, once closed, is
freed by its last reference, not left for the collector: a fuzzing run's 10^5 connections each
left a cycle (with a malformed frame, its traceback's frames; with an ATTACH, the GPU it made)."""

import asyncio
import gc
import logging
import socket
from pathlib import Path

import pytest

from sched_harness import GiB, make_socket_dir, uuid
from test_sched_register_cost import SocketTransport
from xpushare.scheduler.node.state import SchedulerState
from xpushare.scheduler.shell.connection import Connection
from xpushare.scheduler.shell.server import Config, Server
from xpushare.wire.protocol import Attach, Hello, encode


def test_a_serving_scheduler_leaves_what_existed_at_start_out_of_full_collections():
    sockdir = make_socket_dir()
    gc.unfreeze()
    loop = asyncio.new_event_loop()
    server = Server(Config(socket_path=sockdir / "s.sock"))
    try:
        loop.run_until_complete(server.startup())
        frozen, scanned = gc.get_freeze_count(), len(gc.get_objects())
        assert frozen > 10 * scanned, (frozen, scanned)
    finally:
        loop.run_until_complete(server.shutdown())
        loop.close()
        gc.unfreeze()


@pytest.mark.parametrize("attach, malformed", [(False, False), (True, False), (True, True)],
                         ids=["hello", "attach", "attach-then-malformed"])
def test_a_closed_connection_leaves_no_garbage_for_the_collector(attach, malformed, caplog):
    caplog.set_level(logging.CRITICAL)
    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")), [])

    async def connections(n: int):
        state.registry.start(asyncio.get_running_loop())
        for _ in range(n):
            a, b = socket.socketpair(socket.AF_UNIX)
            conn = Connection(state)
            conn.connection_made(SocketTransport(a))
            conn.data_received(encode(Hello(0, 0, "", "")) +
                               (encode(Attach(0, 0, uuid(0), "GPU", GiB, GiB)) if attach else b""))
            if malformed:
                conn.data_received(b"\xff" * 16)
            conn.connection_lost(None)
            a.close()
            b.close()

    async def run():
        await connections(3)  # what the first ones make once (caches, the registry's timers)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            await connections(20)
            gc.collect()
            return [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    assert asyncio.run(run()) == []
