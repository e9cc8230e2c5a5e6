"""control.handle in-process against the control schema: every op with good and bad values (wrong
types, bools posing as ints, out of range, huge, nested junk, unknown fields), each bad one answered
`ok: false` with a reason and nothing changed; and the attacks of the hardening issue."""

import asyncio

import pytest

from ctl_state import ask, build_state, snapshot
from sched_harness import uuid
from xpushare.scheduler.policy import TQ_MAX
from xpushare.wire.scheduling import CAPACITY_MAX

U64 = 2**64 - 1
JUNK = ([], {}, [[[[{}]]]], {"a": {"b": [1]}}, 1.5, True, False, "x" * 1000)


@pytest.fixture
def state():
    loop = asyncio.new_event_loop()
    yield build_state(loop)
    loop.close()


GOOD = [
    {"op": "ping"},
    {"op": "status"},
    {"op": "set_tq", "seconds": 1},
    {"op": "set_tq", "seconds": int(TQ_MAX)},
    {"op": "set_tq", "seconds": "auto", "gpu": 1},
    {"op": "set_tq", "seconds": 5, "gpu": None},  # null: every GPU
    {"op": "set_tq", "seconds": 5, "gpu": "1"},
    {"op": "set_tq", "seconds": 5, "gpu": uuid(1).lower()},
    {"op": "set_mode", "mode": "serial"},
    {"op": "set_mode", "mode": "off", "gpu": uuid(0)[:-1] + "0"},
    {"op": "set_mode", "mode": "auto", "gpu": 0},
    {"op": "set_gpu_memory", "bytes": 0, "gpu": 0},
    {"op": "set_gpu_memory", "bytes": 1, "gpu": uuid(1)},
    {"op": "set_gpu_memory", "bytes": CAPACITY_MAX, "gpu": 0},  # the largest DROP_LOCK's MiB carry
    {"op": "set_priority", "priority": -1000, "pid": 1001},
    {"op": "set_priority", "priority": 1000, "client_id": 2},
    {"op": "place", "count": 1},
    {"op": "place", "count": 2, "memory": 0},
    {"op": "place", "count": 2, "memory": U64},  # fits nowhere: placed all the same, last key first
]


@pytest.mark.parametrize("msg", GOOD, ids=lambda m: str(m)[:60])
def test_good_requests_are_carried_out(state, msg):
    reply = ask(state, msg)
    assert reply["ok"] is True, reply


def _bad(op, field, values, text, **others):
    return [({"op": op, **others, field: v}, text) for v in values]


BAD = [
    *[(msg, "a control request is a JSON object") for msg in ([], [{"op": "ping"}], "ping", 1, None)],
    ({"op": []}, "unknown op []"),
    ({"op": {"op": "ping"}}, "unknown op {'op': 'ping'}"),
    ({}, "unknown op None"),
    ({"op": "frobnicate"}, "unknown op 'frobnicate'"),
    ({"op": "x" * 60000}, "unknown op 'xxx"),
    ({"op": "ping", "x": 1}, "unknown field 'x' for ping (it takes no fields)"),
    ({"op": "status", "gpu": 0}, "unknown field 'gpu' for status"),
    ({"op": "set_tq", "seconds": 5, "gpus": 0}, "unknown field 'gpus' for set_tq (it takes seconds, gpu)"),
    # set_tq
    ({"op": "set_tq"}, "set_tq needs seconds: a positive integer"),
    *_bad("set_tq", "seconds", (0, -1, -2**70, "7", "AUTO", *JUNK), "positive integer"),
    *_bad("set_tq", "seconds", (int(TQ_MAX) + 1, 2**64, 10**400), "at most 4294967"),
    *_bad("set_tq", "gpu", (-1, 2**32, 2**64, "", "²", "١", "GPU 0", "x" * 49, "9" * 5000, *JUNK),
          "invalid gpu", seconds=5),
    ({"op": "set_tq", "seconds": 5, "gpu": 7}, "no GPU matches 7"),
    ({"op": "set_tq", "seconds": 5, "gpu": "GPU-"}, "'GPU-' matches several GPUs"),
    # set_mode
    ({"op": "set_mode"}, "set_mode needs mode: auto, serial or off"),
    *_bad("set_mode", "mode", ("fast", "AUTO", 1, ["auto"], {"auto": 1}, *JUNK), "auto, serial or off"),
    ({"op": "set_mode", "mode": "off", "gpu": [0]}, "invalid gpu [0]"),
    # set_gpu_memory
    ({"op": "set_gpu_memory", "gpu": 0}, "set_gpu_memory needs bytes"),
    ({"op": "set_gpu_memory", "bytes": 1}, "set_gpu_memory needs gpu"),
    *_bad("set_gpu_memory", "bytes", (-1, "1", "1GiB", *JUNK), "a positive integer, or 0 to clear",
          gpu=0),
    *_bad("set_gpu_memory", "bytes", (CAPACITY_MAX + 1, U64, U64 + 1, 2**100),
          "at most 4 PiB less 1 MiB", gpu=0),
    *_bad("set_gpu_memory", "gpu", (-1, 1.0, True, "", "GPU 0", {}), "invalid gpu", bytes=1),
    # set_priority
    ({"op": "set_priority", "pid": 1001}, "set_priority needs priority"),
    *_bad("set_priority", "priority", (1001, -1001, 2**64, "1", *JUNK), "from -1000 to 1000", pid=1001),
    ({"op": "set_priority", "priority": 1}, "set_priority needs a pid or a client_id"),
    ({"op": "set_priority", "priority": 1, "pid": 1001, "client_id": 1}, "not both"),
    *_bad("set_priority", "pid", (0, -1, 2**31, 2**64, "1001", *JUNK), "invalid pid", priority=1),
    *_bad("set_priority", "client_id", (0, -1, 2**63, "1", *JUNK), "invalid client_id", priority=1),
    ({"op": "set_priority", "priority": 1, "pid": 999}, "no client with pid 999"),
    ({"op": "set_priority", "priority": 1, "client_id": 999}, "no client with client_id 999"),
    # place
    ({"op": "place"}, "place needs count: how many GPUs"),
    *_bad("place", "count", (0, -1, 2**31, "2", "auto", *JUNK), "invalid count"),
    *_bad("place", "memory", (-1, "1GiB", U64 + 1, *JUNK), "invalid memory", count=1),
    ({"op": "place", "count": 3}, "asked for 3 GPUs, but the scheduler knows 2 it can place on"),
    ({"op": "place", "count": 1, "gpu": 0}, "unknown field 'gpu' for place (it takes count, memory)"),
    # an integer too large for a float (it raised OverflowError: "internal error")
    *_bad("set_compute_share", "value", (10**400, -10**400, 2**1024), "invalid value", pid=1001),
    *_bad("set_compute_limit", "value", (10**400, -10**400), "invalid value", pid=1001),
    *_bad("set_claim", "compute_share", (10**400,), "invalid compute_share", claim="c", pod_uid="p"),
]


@pytest.mark.parametrize("msg,text", BAD, ids=lambda m: str(m)[:60])
def test_bad_requests_get_a_reason_and_change_nothing(state, msg, text):
    before = snapshot(state)
    reply = ask(state, msg)
    assert reply["ok"] is False and text in reply["error"], reply
    assert len(reply["error"]) < 300  # values are quoted shortened
    assert snapshot(state) == before


def test_good_requests_change_what_they_say(state):
    assert ask(state, {"op": "set_tq", "seconds": 7, "gpu": 1})["ok"]
    assert ask(state, {"op": "set_mode", "mode": "off"})["ok"]
    assert ask(state, {"op": "set_gpu_memory", "bytes": CAPACITY_MAX, "gpu": uuid(0)})["ok"]
    assert ask(state, {"op": "set_priority", "priority": 9, "client_id": 2})["ok"]
    mode, tq, gpus, clients = snapshot(state)
    assert (mode.value, tq) == ("off", 30.0)
    assert [(g[1].value, g[2], g[3]) for g in gpus] == [("off", 30.0, CAPACITY_MAX), ("off", 7.0, 0)]
    assert clients == [(1, 0), (2, 9)]


# -- the attacks of the hardening issue (in-process; tests/scheduler/test_control_live.py has the
# daemon's side) ------------------------------------------------------------------------------

def test_attack_op_that_is_a_list(state):
    assert ask(state, {"op": []}) == {"ok": False, "error": "unknown op []"}


def test_attack_gpu_memory_beyond_what_attached_carries(state):
    """2**64 bytes was accepted, and every later ATTACH of that GPU failed packing ATTACHED."""
    reply = ask(state, {"op": "set_gpu_memory", "bytes": 2**64, "gpu": 0})
    assert reply["ok"] is False and "at most 4 PiB less 1 MiB" in reply["error"]
    assert state.registry.in_order()[0].capacity_override == 0


@pytest.mark.parametrize("sel", ["²", "٣", "9" * 5000], ids=["superscript", "arabic", "5000-digits"])
def test_attack_gpu_digits_that_int_refuses(state, sel):
    """str.isdigit() says yes to these, int() raised ValueError: an internal error."""
    reply = ask(state, {"op": "set_mode", "mode": "off", "gpu": sel})
    assert reply["ok"] is False and "invalid gpu" in reply["error"]


def test_the_largest_capacity_is_what_drop_locks_room_carries():
    """--gpu-memory and set_gpu_memory took 2**64 - 1 bytes: a room within such a capacity does not
    fit DROP_LOCK's evict_mib (MiB in a u32), nor is it exact as a double or a Kubernetes quantity."""
    from xpushare.wire.ctlschema import unsigned_max
    from xpushare.wire.protocol import DropLock
    assert CAPACITY_MAX == unsigned_max(DropLock, "evict_mib") << 20
    assert CAPACITY_MAX < 2**53 and float(CAPACITY_MAX) == CAPACITY_MAX
