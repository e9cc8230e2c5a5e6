"""`nvsharectl status` at many clients: a control reply may be larger than the 64 KiB frames peers
send the scheduler (protocol.MAX_CTL_REPLY), so status lists every client with its whole command line
where it used to fail ("reply too large for one frame") at about 390 clients."""

import json
import os
import time

from sched_harness import registered
from xpushare.cli.client import CtlClient
from xpushare.wire.protocol import MAX_PAYLOAD
from xpushare.scheduler.node import peer
from xpushare.scheduler.control.status import COMMAND_MAX

CLIENTS = 600


def test_status_lists_hundreds_of_clients_in_one_reply(scheduler):
    clients = []
    try:
        for _ in range(CLIENTS):
            clients.append(registered(scheduler.sock))
        with CtlClient(scheduler.sock) as ctl:
            t0 = time.monotonic()
            reply = ctl.request("status")
            took = time.monotonic() - t0
        assert reply["ok"], reply
        assert len(reply["clients"]) == CLIENTS
        assert len(json.dumps(reply)) > MAX_PAYLOAD  # it could not have been one 64 KiB frame
        # whole (up to status.COMMAND_MAX, which a long pytest command line can pass), not shortened
        assert {c["command"] for c in reply["clients"]} == {peer.cmdline(os.getpid())[:COMMAND_MAX]}
        print(f"status of {CLIENTS} clients: {took * 1e3:.1f} ms")
    finally:
        for c in clients:
            c.close()


def test_no_step_of_a_large_status_reply_copies_it_more_than_once():
    """The reply of 255 clients on 20 GPUs (1.8 MB) is a slicer job (statusreply.steps): no step
    may hold the loop for the whole reply's text. Witness: the memory a step allocates at its
    peak, which for the step that makes the frame is the frame itself and a fraction more; joining
    the text, encoding it and prefixing the header each copied all of it."""
    import asyncio
    import tracemalloc
    from pathlib import Path

    from ctl_state import FakeTransport
    from sched_harness import uuid
    from xpushare.scheduler.control import statusreply
    from xpushare.scheduler.node.access import Viewer
    from xpushare.scheduler.node.state import Config, SchedulerState
    from xpushare.scheduler.shell.connection import Conn
    from xpushare.wire.protocol import Hello

    loop = asyncio.new_event_loop()
    try:
        state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")), [])
        state.registry.start(loop)
        gpus = [state.registry.add(uuid(i), i, "Mock GPU", 16 << 30) for i in range(20)]
        for _ in range(255):
            c = Conn(state.next_id(), FakeTransport(), os.getpid(), os.getuid(), os.getgid())
            c.hello = Hello(0, 0, "", "")
            state.connected(c)
            for dev, g in enumerate(gpus):
                c.devices[dev] = g
                state.registry.join(c, g)
                state.quotas.attached(c, g)
        gen = statusreply.steps(state, Viewer(0, admin=True))
        tracemalloc.start()
        peaks = []
        try:
            while True:
                before = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                try:
                    next(gen)
                except StopIteration as done:
                    frame = done.value
                    peaks.append(tracemalloc.get_traced_memory()[1] - before)
                    break
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
        finally:
            tracemalloc.stop()
    finally:
        loop.close()
    assert len(frame) > 1 << 20
    assert max(peaks) < 1.3 * len(frame), (max(peaks), len(frame))
