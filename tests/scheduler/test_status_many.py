"""`nvsharectl status` at many clients: a control reply may be larger than the 64 KiB frames peers
send the scheduler (protocol.MAX_CTL_REPLY), so status lists every client with its whole command line
where it used to fail ("reply too large for one frame") at about 390 clients."""

import asyncio
import gc
import json
import os
import time
from pathlib import Path

from ctl_state import FakeTransport
from sched_harness import registered, uuid
from xpushare.cli.client import CtlClient
from xpushare.scheduler.control import statusreply
from xpushare.scheduler.control.status import COMMAND_MAX
from xpushare.scheduler.node import peer
from xpushare.scheduler.node.access import Viewer
from xpushare.scheduler.node.state import Config, SchedulerState
from xpushare.scheduler.shell.connection import Conn
from xpushare.wire.protocol import MAX_PAYLOAD, Hello

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
    import tracemalloc

    loop = asyncio.new_event_loop()
    try:
        state = _node_of(loop, 255, 20)
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
                    frame = b"".join(done.value)  # the frame's pieces (Conn.send_pieces writes them)
                    peaks.append(tracemalloc.get_traced_memory()[1] - before)
                    break
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
        finally:
            tracemalloc.stop()
    finally:
        loop.close()
    assert len(frame) > 1 << 20
    assert max(peaks) < 1.3 * len(frame), (max(peaks), len(frame))


def _node_of(loop, clients: int, gpus: int) -> SchedulerState:
    """A scheduler's state of `clients` clients each attached to all of `gpus` NVML GPUs."""
    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")), [])
    state.registry.start(loop)
    known = [state.registry.add(uuid(i), i, "Mock GPU", 16 << 30) for i in range(gpus)]
    for _ in range(clients):
        c = Conn(state.next_id(), FakeTransport(), os.getpid(), os.getuid(), os.getgid())
        c.hello = Hello(0, 0, "", "")
        state.connected(c)
        for dev, g in enumerate(known):
            c.devices[dev] = g
            state.registry.join(c, g)
            state.quotas.attached(c, g)
    return state


def test_a_reply_too_large_for_a_frame_holds_few_objects_for_the_collector_between_steps():
    """An admin's status of 255 clients on 20 NVML GPUs does not fit one frame, and has no
    client-made GPU to leave out: it leaves out its last clients, and between two steps (slices,
    over which what it holds is promoted to the collector's oldest generation, whose growth sets
    off full collections of the whole state: 20 ms at this size) it holds its entries as text, not
    as thousands of dicts. Witness: the collector's tracked objects between steps."""
    loop = asyncio.new_event_loop()
    try:
        state = _node_of(loop, 255, 20)
        gc.collect()
        before = len(gc.get_objects())
        gen = statusreply.steps(state, Viewer(0, admin=True))
        held, step = 0, 0
        while True:
            try:
                next(gen)
            except StopIteration as done:
                frame = b"".join(done.value)  # the frame's pieces (Conn.send_pieces writes them)
                break
            step += 1
            if step % 25 == 0:
                held = max(held, len(gc.get_objects()) - before)
    finally:
        loop.close()
    assert b'"clients_not_listed"' in frame and len(frame) > 1 << 20
    assert held < 1000, held
