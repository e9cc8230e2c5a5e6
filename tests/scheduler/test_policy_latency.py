"""What a latency-sensitive server's request does to a training job holding the GPU, mode by mode,
when the server has the higher priority (the policy's own rule, reused: docs/protocol.md
"Priorities"): it preempts at once wherever it cannot run beside the holder (serial; auto when the
two do not fit), runs beside it where they fit (auto: the queue bound then keeps the holder's
queued work short, node/latency.py) and is granted at once in mode off. At equal priority it waits
for the quantum, as any client: latency-sensitive bounds the others' queues, it is no priority."""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import Arbiter, Drop, Grant, Mode

from test_policy_replay import Replay, auto, with_footprints

TQ = 10.0
P = DropReason.PREEMPTED


def _serial():
    return Arbiter(Mode.SERIAL, TQ)


def _off():
    return Arbiter(Mode.OFF, TQ)


CASES = [  # (id, arbiter, footprints GiB (train, server), server priority, what its request does)
    ("serial, higher: preempts at once", _serial, (3, 1), 10, [Drop("train", P)]),
    ("serial, equal: waits for the quantum", _serial, (3, 1), 0, []),
    ("auto, fits beside: runs beside at once", auto, (3, 1), 10, [Grant("server", TQ)]),
    ("auto, fits beside, equal priority: beside too", auto, (3, 1), 0, [Grant("server", TQ)]),
    ("auto, does not fit: preempts at once with evict", auto, (8, 4), 10,
     [Drop("train", P, evict=True)]),
    ("auto, does not fit, equal priority: waits", auto, (8, 4), 0, []),
    ("off: granted at once", _off, (8, 4), 10, [Grant("server", 0)]),
]


@pytest.mark.parametrize("make, sizes, priority, expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_servers_request_beside_a_training_holder(make, sizes, priority, expected):
    r = Replay(make())
    with_footprints(r, 0, train=sizes[0], server=sizes[1])
    r(0, "set_priority", "server", priority)
    r(0, "request", "train")
    assert r(1, "request", "server") == expected


def test_after_a_preemption_the_server_runs_next_and_the_training_right_after():
    r = Replay(_serial())
    r(0, "set_priority", "server", 10)
    r(0, "request", "train")
    r(1, "request", "server")
    assert r(1.001, "release", "train") == [Grant("server", TQ)]
    r(1.002, "request", "train")                     # the training asks again at once
    assert r(1.010, "release", "server") == [Grant("train", TQ)]
