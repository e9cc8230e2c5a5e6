"""The `place` control op: against a live scheduler with four GPUs from (fake) NVML, loaded by
protocol clients, and in-process for who may ask."""

import asyncio
import os

import pytest

from ctl_state import FakeTransport, build_state
from place_load import ARGS, FOUR, ORDER, loaded_gpus
from sched_harness import GiB, as_user, registered, uuid
from xpushare.cli.client import CtlClient
from xpushare.wire.protocol import FrameDecoder
from xpushare.scheduler.control import ops
from xpushare.scheduler.shell.connection import Conn

NOBODY = 65534


@pytest.fixture
def loaded(start_scheduler):
    s = start_scheduler(*ARGS, nvml=FOUR)
    with loaded_gpus(s.sock) as ctl:
        yield s, ctl


def test_least_loaded_first(loaded):
    _, ctl = loaded
    reply = ctl.request("place", count=4)
    assert reply["ok"], reply
    # 2 idle; 3 commits 0.25 of its time; 1 commits all of it (no limit); 0 has a waiter, which
    # counts before its lower commitment (0.2).
    assert [g["index"] for g in reply["gpus"]] == ORDER == [2, 3, 1, 0]
    assert [g["uuid"] for g in reply["gpus"]] == [uuid(2), uuid(3), uuid(1), uuid(0)]
    why = reply["why"]
    assert why[0] == "gpu 2: 80GiB free of 80GiB, 0 waiting, 0 holding, compute 0 committed"
    assert why[1].startswith("gpu 3: ") and "compute 0.25 committed" in why[1]
    assert why[3].startswith("gpu 0: ") and "1 waiting, 1 holding, compute 0.2 committed" in why[3]
    two = ctl.request("place", count=2)
    assert [g["index"] for g in two["gpus"]] == [2, 3] and len(two["why"]) == 2


def test_memory_the_job_needs_puts_gpus_it_does_not_fit_last(loaded):
    _, ctl = loaded
    # 60 GiB does not fit beside GPU 1's 30 GiB (and its context): GPU 1 goes behind GPU 0.
    reply = ctl.request("place", count=4, memory=60 * GiB)
    assert [g["index"] for g in reply["gpus"]] == [2, 3, 0, 1]
    assert "does not fit 60GiB" in reply["why"][3]


def test_more_than_the_node_has_and_made_up_gpus_are_refused(loaded):
    s, ctl = loaded
    with registered(s.sock, devices=()) as c:
        c.attach(0, uuid(9))  # a GPU NVML did not report: never placed on
        reply = ctl.request("place", count=5)
    assert reply == {"ok": False, "error": "asked for 5 GPUs, but the scheduler knows 4 it can "
                                           "place on (0, 1, 2, 3)"}


def test_a_scheduler_without_nvml_places_nothing(scheduler):
    with CtlClient(scheduler.sock) as ctl:
        reply = ctl.request("place", count=1)
    assert not reply["ok"] and "knows 0 it can place on (none)" in reply["error"]


def test_any_local_user_may_ask_in_process():
    loop = asyncio.new_event_loop()
    try:
        state = build_state(loop)
        stranger = Conn(99, FakeTransport(), os.getpid(), os.getuid() + 12345, os.getgid())

        def ask(msg):
            d = FrameDecoder(replies=True)
            d.feed(ops.handle(state, stranger, msg))
            (frame,) = d.frames()
            return frame.decode()
        assert ask({"op": "place", "count": 2})["ok"]
        assert "permission denied" in ask({"op": "set_tq", "seconds": 5})["error"]
    finally:
        loop.close()


def _place_as_nobody(sock):
    with CtlClient(sock) as ctl:
        return ctl.request("place", count=1)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_any_local_user_may_ask_live(loaded):
    s, _ = loaded
    reply = as_user(NOBODY, NOBODY, _place_as_nobody, s.sock)
    assert reply["ok"] and reply["gpus"] == [{"index": 2, "uuid": uuid(2)}], reply
