"""Fuzzing control requests: a property test of ops.handle in-process (hypothesis), and a
bounded run against the real daemon with fuzzed control requests and malformed frames over many
connections, after which the daemon must be alive, its log free of tracebacks, and a well-behaved
client must still get the lock. Also the daemon's side of the hardening issue's attacks."""

import asyncio
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctl_state import ask, build_state, snapshot
from sched_harness import FakeClient, registered, uuid
from testkit.fuzz import FIELDS, REGISTER, fuzz_request, malformed_frame
from xpushare.wire.protocol import Attached, MessageType, encode, encode_json
from xpushare.scheduler.control import ops
from xpushare.wire.scheduling import CAPACITY_MAX

SCALAR = (st.none() | st.booleans() | st.integers() | st.integers(-2**80, 2**80) | st.floats()
          | st.text(max_size=60) | st.sampled_from(["auto", "serial", "off", uuid(0), "GPU-", "0"]))
VALUE = st.recursive(SCALAR, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                                c, max_size=3),
                     max_leaves=8)
REQUEST = (st.fixed_dictionaries({"op": st.sampled_from(sorted(ops.OPS)) | VALUE},
                                 optional={f: VALUE for f in (*FIELDS, "x")})
           | st.dictionaries(st.text(max_size=8), VALUE, max_size=4) | VALUE)


@settings(max_examples=600, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(REQUEST)
def test_any_request_gets_a_reply_and_a_refused_one_changes_nothing(msg):
    loop = asyncio.new_event_loop()
    try:
        state = build_state(loop)
        before = snapshot(state)
        reply = ask(state, msg)  # raises on anything but a CTL_REPLY frame
        if reply["ok"] is not True:
            assert reply["ok"] is False and isinstance(reply["error"], str) and reply["error"]
            assert snapshot(state) == before
        for gpu in state.registry.gpus.values():  # whatever was accepted, ATTACHED can carry it
            encode(Attached(0, 0, gpu.capacity))
    finally:
        loop.close()


# -- the daemon ---------------------------------------------------------------------------------

def _clean_log(scheduler) -> None:
    log = scheduler.log()
    assert "Traceback" not in log and "internal error" not in log, log[-4000:]


def test_attack_gpu_memory_beyond_attached_then_attach_live(scheduler):
    """set_gpu_memory 2**64 was accepted, and every later ATTACH of that GPU got an internal error."""
    with registered(scheduler.sock) as c:  # keeps the client-made GPU, and its setting, known
        reply = c.ctl("set_gpu_memory", bytes=2**64, gpu=uuid(0))
        assert not reply["ok"] and "at most 4 PiB less 1 MiB" in reply["error"]
        assert c.ctl("set_gpu_memory", bytes=CAPACITY_MAX, gpu=uuid(0)) == {"ok": True}
        with registered(scheduler.sock, devices=()) as d:
            assert d.attach(0).capacity == CAPACITY_MAX
    _clean_log(scheduler)


def test_attack_deeply_nested_request_live(scheduler):
    """A request of 60000 '[' was a RecursionError, logged with a traceback as an internal error."""
    for payload in (b"[" * 60000, b'{"op":' * 10000, b'{"op":"set_tq","seconds":' + b"9" * 5000 + b"}"):
        with FakeClient(scheduler.sock) as c:
            c.send(MessageType.CTL_REQUEST, payload)
            assert "protocol error" in c.expect(MessageType.ERROR)
            assert c.closed_by_peer()
    assert scheduler.ctl("ping")["ok"]
    _clean_log(scheduler)


# The live run: fixed seed and counts, so that it is bounded and repeatable. Its requests and
# frames come from testkit.fuzz, which bench/scheduling/soak.py draws from too.
REQUESTS, REQUEST_CONNS, FRAMES, WORKERS = 2000, 50, 2000, 8


def _requests_on_one_connection(sock, msgs) -> int:
    with FakeClient(sock, timeout=10) as c:
        c.send_raw(b"".join(encode_json(MessageType.CTL_REQUEST, m) for m in msgs))
        for _ in msgs:
            reply = c.expect(MessageType.CTL_REPLY, timeout=10)
            assert reply["ok"] is True or (reply["ok"] is False and reply["error"]), reply
    return len(msgs)


def _malformed_on_one_connection(sock, data: bytes, hello: bool) -> None:
    with FakeClient(sock, timeout=10) as c:
        c.send_raw((REGISTER if hello else b"") + data)
        c.sock.shutdown(socket.SHUT_WR)
        while c.sock.recv(65536):  # until the daemon closes it
            pass


def test_live_fuzz_leaves_the_daemon_serving(scheduler):
    rng = random.Random(20261123)
    holder = registered(scheduler.sock)
    t0 = time.monotonic()
    msgs = [fuzz_request(rng) for _ in range(REQUESTS)]
    frames = [(malformed_frame(rng), rng.random() < 0.5) for _ in range(FRAMES)]
    per = REQUESTS // REQUEST_CONNS
    with ThreadPoolExecutor(WORKERS) as pool:
        answered = sum(pool.map(lambda i: _requests_on_one_connection(
            scheduler.sock, msgs[i:i + per]), range(0, REQUESTS, per)))
        list(pool.map(lambda f: _malformed_on_one_connection(scheduler.sock, *f), frames))
    elapsed = time.monotonic() - t0
    assert answered == REQUESTS and elapsed < 60, elapsed
    assert scheduler.alive()
    _clean_log(scheduler)
    # Put back what fuzzed admin requests may have changed, then a well-behaved client is served.
    for op, fields in (("set_mode", {"mode": "serial"}), ("set_tq", {"seconds": 30}),
                       ("set_gpu_memory", {"bytes": 0, "gpu": uuid(0)})):
        assert scheduler.ctl(op, **fields) == {"ok": True}
    holder.close()
    with registered(scheduler.sock) as c:
        c.request()
        assert c.expect(MessageType.LOCK_OK).device == 0
    print(f"live fuzz: {REQUESTS} requests on {REQUEST_CONNS} connections, {FRAMES} malformed "
          f"frames on as many connections, {elapsed:.1f} s")
