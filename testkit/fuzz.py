"""Fuzzed control requests and malformed frames for the scheduler, shared by the bounded live fuzz of
tests/scheduler/test_control_fuzz.py and the soak run of bench/scheduling/soak.py.

Everything is drawn from a random.Random the caller seeds, so a run is repeatable (the random bytes
of malformed frames come from it too, not from os.urandom).
"""

from __future__ import annotations

import random

from xpushare.wire.protocol import (
    Attach, Hello, Job, LockRequest, MemUpdate, MessageType, Released, encode, encode_frame,
    encode_json,
)
from xpushare.scheduler.control import ops

GiB = 1 << 30
FIELDS = ("seconds", "gpu", "mode", "bytes", "priority", "pid", "client_id", "count", "memory")


def uuid(i: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{i:012x}"


# Values of every JSON type and edge: bounds of the protocol's integers, non-finite floats, lone
# surrogates, GPU selectors that almost match.
JUNK = [0, 1, -1, 2**31, 2**63, 2**64 - 1, 2**64, 10**30, True, False, None, 1.5, -0.0, 1e308,
        float("nan"), float("inf"), "", "auto", "serial", "off", "²", "9" * 40, "x" * 100, uuid(0),
        uuid(0)[:12], "GPU-", "\ud800", "\u0000", [], {}, [1, [2, [3]]], {"a": {"b": None}}]
# `shutdown` is left out: the fuzz runs as the daemon's own user, an admin, and a run checks that
# the daemon is still serving afterwards (test_cli_shutdown.py tests it).
ENDS_SERVING = ("shutdown",)
OPS = [*(name for name in ops.OPS if name not in ENDS_SERVING), "", "PING", "set_tq ", None, 1,
       [], {}]
# The ops of OPS that change settings (what a fuzz run has to put back afterwards).
ADMIN_OPS = tuple(name for name, op in ops.OPS.items() if op.admin and name not in ENDS_SERVING)


def fuzz_request(rng: random.Random) -> dict:
    """A control request: mostly a known op with 0-4 fields of junk or huge integers."""
    msg = {"op": rng.choice(OPS)} if rng.random() < 0.9 else {}
    for name in rng.sample([*FIELDS, "x", "op"], rng.randint(0, 4)):
        msg[name] = rng.choice(JUNK) if rng.random() < 0.7 else rng.randint(-2**70, 2**70)
    return msg


def request_frame(msg: dict) -> bytes:
    """CTL_REQUEST carrying `msg` (JSON that Python writes: NaN and Infinity included)."""
    return encode_json(MessageType.CTL_REQUEST, msg)


# Valid frames of every kind a client sends, from which malformed ones are made. VALID[0] + VALID[1]
# (HELLO, ATTACH of uuid(0)) registers a client on the fuzz's own GPU.
VALID = [encode(Hello(0, 3, "p", "n")), encode(Attach(0, 0, uuid(0), "Mock", 16 * GiB, 16 * GiB)),
         encode(LockRequest(0, 0)), encode(Released(0, 0, 1, 2, 3)), encode(MemUpdate(0, 0, GiB, 0)),
         encode(Job(2, "", 4, 2, 1, 1, "run-1", "10.0.0.1:29500")),
         encode_json(MessageType.CTL_REQUEST, {"op": "status"})]
REGISTER = VALID[0] + VALID[1]


def _bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def malformed_frame(rng: random.Random) -> bytes:
    """One bad frame: random bytes; JSON that is no request (deep, not an object, not UTF-8, not
    JSON); or a valid frame with bytes changed, then cut or grown."""
    kind = rng.randrange(5)
    if kind == 0:
        return _bytes(rng, rng.randint(1, 200))
    if kind == 1:
        return encode_frame(MessageType.CTL_REQUEST, rng.choice(
            [b"[" * rng.randint(33, 60000), b"[1]", b"\xff\xfe", b"{", b"1" * 5000, b"nul"]))
    data = bytearray(rng.choice(VALID))
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data[:rng.randint(1, len(data))] if kind == 3 else data + _bytes(rng, kind))
