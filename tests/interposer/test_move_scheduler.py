"""Moving a client to another GPU, the scheduler's side (src/xpushare/scheduler/node/move.py): a
client written against docs/protocol.md, the real scheduler, and its checkpoint worker on the mock
driver (whose restore with GPU pairs checks them and records the move). The order's steps are
checked in the order the client sees its messages: DROP_LOCK (MOVE), no grant for what it asks
meanwhile, SUSPEND (MOVE), RESUMED (MOVED); then it attaches the new GPU and is granted there."""

from __future__ import annotations

import os

import pytest

from sched_harness import FakeClient, SchedulerProcess, make_socket_dir, uuid
from xpushare.wire.protocol import (
    DROP_EVICT, HELLO_LATENCY_SENSITIVE, HELLO_MOVE, HELLO_QUEUE_BOUND, HELLO_SUSPEND, HELLO_SWAP,
    RESUMED_MOVED, SUSPEND_MOVE, DropReason,
    MessageType, ResumeRequest, SuspendReady, SuspendStatus, encode,
)
from testkit.waiting import poll

from .harness import MockLog

GiB, MiB = 1 << 30, 1 << 20
MOVABLE = HELLO_SUSPEND | HELLO_MOVE | HELLO_SWAP


@pytest.fixture
def node(artifacts, tmp_path):
    """Start a scheduler whose NVML lists two GPUs (names as given) over a mock of `devices`."""
    started = []

    def start(names=("Mock H200", "Mock H200"), devices=2, args=(), env=None):
        sock = make_socket_dir() / "s.sock"
        log = MockLog(tmp_path / "mock.jsonl")
        env = {"MOCK_CUDA_LOG": str(log.path), "MOCK_CUDA_DEVICES": str(devices),
               "MOCK_CUDA_CHECKPOINT_DIR": str(tmp_path), "MOCK_CUDA_DEVICE_NAMES": ",".join(names),
               **(env or {})}
        nvml = [{"uuid": uuid(i), "name": n, "memory": 16 * GiB} for i, n in enumerate(names)]
        s = SchedulerProcess(sock, ["--cuda-library", str(artifacts.libcuda), "--mode", "auto", *args],
                             env, nvml=nvml).start()
        started.append(s)
        return s, log

    yield start
    for s in started:
        s.stop()


def _client(sched, flags=MOVABLE, devices=(0,)) -> FakeClient:
    c = FakeClient(sched.socket)
    c.hello(flags=flags)
    for d in devices:
        c.attach(d, uuid(d), name="Mock H200")
        c.mem_update(d, other=64 * MiB)
    return c


def _held(c: FakeClient, device=0):
    c.request(device)
    return c.expect(MessageType.LOCK_OK)


def _move(sched, c: FakeClient, to) -> dict:
    with FakeClient(sched.socket) as admin:
        reply = admin.ctl("move", client_id=c.client_id, to=to)
    return reply


def _status(sched, c: FakeClient) -> dict:
    return next(x for x in sched.status()["clients"] if x["client_id"] == c.client_id)


def _ready(c: FakeClient, status=SuspendStatus.READY):
    c.send_raw(encode(SuspendReady(int(status), 0)))


def _steps(log: MockLog) -> list[tuple[str, int, str | None]]:
    me = os.getpid()
    return [(e["fn"].removeprefix("cuCheckpointProcess"), e["ret"], e.get("moved"))
            for e in log.entries() if e["fn"].startswith("cuCheckpointProcess") and e.get("target") == me
            and e["fn"] != "cuCheckpointProcessGetState"]


def test_a_holder_is_dropped_suspended_restored_on_the_other_gpu_and_granted_there(node):
    sched, log = node()
    c = _client(sched)
    _held(c)
    reply = _move(sched, c, 1)
    assert reply["ok"] and reply["clients"][0]["moving"], reply
    drop = c.expect(MessageType.DROP_LOCK)
    assert (drop.device, drop.reason, drop.flags & DROP_EVICT) == (0, DropReason.MOVE, DROP_EVICT)
    c.release(0)
    c.request(0)  # the application asks again at once: held back, no grant on GPU 0
    suspend = c.expect(MessageType.SUSPEND)
    assert suspend.flags & SUSPEND_MOVE
    assert _status(sched, c)["state"] == "moving"
    c.residency(0, resident=0, host=64 * MiB)  # its memory left the GPU, as its library reports
    _ready(c)
    resumed = c.expect(MessageType.RESUMED, timeout=10)
    assert resumed.flags & RESUMED_MOVED
    assert _steps(log) == [("Lock", 0, None), ("Checkpoint", 0, None), ("Restore", 0, "0>1,1>0"),
                           ("Unlock", 0, None)]
    # its library attaches the GPU its ordinal names now (its memory is out there too), and asks
    c.attach(0, uuid(1), name="Mock H200")
    c.mem_update(0, other=64 * MiB)
    there = _status(sched, c)["gpus"][0]
    assert (there["uuid"], there["resident_bytes"], there["swapped_bytes"]) == (uuid(1), 0, 64 * MiB)
    _held(c)
    me = _status(sched, c)
    assert [g["uuid"] for g in me["gpus"]] == [uuid(1)]
    assert me["move"]["moves"] == 1 and me["move"]["under_way"] is None
    assert me["move"]["last"]["to"] == uuid(1) and me["move"]["refused"] is None
    assert sched.holders(uuid(0)) == set()


def test_a_busy_answer_is_asked_again_and_a_suspended_client_is_restored_there_at_once(node):
    sched, log = node()
    c = _client(sched)
    assert _move(sched, c, uuid(1))["clients"][0]["moving"]
    assert c.expect(MessageType.SUSPEND).flags & SUSPEND_MOVE
    _ready(c, SuspendStatus.BUSY)  # work in flight: asked again
    assert c.expect(MessageType.SUSPEND).flags & SUSPEND_MOVE
    _ready(c)
    assert c.expect(MessageType.RESUMED, timeout=10).flags & RESUMED_MOVED
    c.attach(0, uuid(1), name="Mock H200")
    # suspended by hand first, a client moved back is restored with the pair, not asked again
    with FakeClient(sched.socket) as admin:
        assert admin.ctl("suspend", client_id=c.client_id)["clients"][0]["suspending"]
    c.expect(MessageType.SUSPEND)
    _ready(c)
    poll(lambda: _status(sched, c)["suspend"]["phase"] == "suspended", 10, what="suspended")
    assert _move(sched, c, 0)["clients"][0]["moving"]
    assert c.expect(MessageType.RESUMED, timeout=10).flags & RESUMED_MOVED
    assert [m for _, _, m in _steps(log) if m] == ["0>1,1>0", "0>1,1>0"]  # every GPU, both ways


@pytest.mark.parametrize("devices, env, restores, why", [
    # the driver finds no room on the new GPU
    (2, {"MOCK_CUDA_CHECKPOINT_FAIL": "restore:1"}, [False, True], "restore: CUDA_ERROR_OUT_OF_MEMORY"),
    # NVML lists a second GPU the driver does not have: the worker asks the driver nothing
    (1, {}, [True], f"cannot move: {uuid(1)} is not a GPU of this node"),
])
def test_a_failed_restore_there_restores_it_where_it_was_and_grants_what_it_asked(node, devices, env,
                                                                                   restores, why):
    sched, log = node(devices=devices, env=env)
    c = _client(sched)
    _held(c)
    assert _move(sched, c, 1)["clients"][0]["moving"]
    c.expect(MessageType.DROP_LOCK)
    c.release(0)
    c.request(0)
    c.expect(MessageType.SUSPEND)
    _ready(c)
    resumed = c.expect(MessageType.RESUMED, timeout=10)
    assert not resumed.flags & RESUMED_MOVED
    c.expect(MessageType.LOCK_OK)  # the request held back goes to the policy once it runs again
    assert [(s, r == 0) for s, r, _ in _steps(log)] == [
        ("Lock", True), ("Checkpoint", True), *(("Restore", ok) for ok in restores), ("Unlock", True)]
    move = _status(sched, c)["move"]
    assert move["moves"] == 0 and move["refused"] == f"to GPU 1: the restore there failed: {why}"


@pytest.mark.parametrize("case, why", [
    ("chip types", "the chip types differ"),
    ("same gpu", "is on GPU 0 already"),
    ("old library", "cannot be moved (an older one)"),
    ("two gpus", "more than one GPU"),
    ("suspension off", "--no-suspend"),
])
def test_a_move_that_cannot_be_done_is_refused_with_why_and_nothing_changes(node, case, why):
    names = ("Mock H200", "Mock H100") if case == "chip types" else ("Mock H200", "Mock H200")
    sched, log = node(names=names, args=("--no-suspend",) if case == "suspension off" else ())
    c = _client(sched, flags=HELLO_SUSPEND | HELLO_SWAP if case == "old library" else MOVABLE,
                devices=(0, 1) if case == "two gpus" else (0,))
    _held(c)
    reply = _move(sched, c, 0 if case == "same gpu" else 1)
    assert reply["ok"] and not reply["clients"][0]["moving"]
    assert why in reply["clients"][0]["why"], reply
    assert c.nothing_sent() and _status(sched, c)["state"] == "holding" and _steps(log) == []


def test_a_move_names_a_gpu_the_node_has(node):
    sched, _ = node()
    c = _client(sched)
    reply = _move(sched, c, 7)
    assert not reply["ok"] and "no GPU matches 7" in reply["error"]


@pytest.mark.parametrize("flag, others, moved", [
    (True, {0: 10}, True),            # its GPU full, the other free: moved there
    (False, {0: 10}, False),          # the policy off
    (True, {0: 2}, False),            # room where it is
    (True, {0: 4}, False),            # room where it is, to within its context: 10.75 + 4.75 of 16
    (True, {0: 10, 1: 10}, False),    # no room anywhere: restored where it was
])
def test_move_suspended_restores_a_client_whose_gpu_is_full_where_there_is_room(node, flag, others, moved):
    sched, log = node(args=("--move-suspended",) if flag else ())
    a = _client(sched)
    a.mem_update(0, other=10 * GiB)
    with FakeClient(sched.socket) as admin:
        assert admin.ctl("suspend", client_id=a.client_id)["clients"][0]["suspending"]
    a.expect(MessageType.SUSPEND)
    _ready(a)
    poll(lambda: _status(sched, a)["suspend"]["phase"] == "suspended", 10, what="suspended")
    crowd = []
    for gpu, gib in others.items():
        c = FakeClient(sched.socket)
        c.hello(flags=MOVABLE)
        c.attach(gpu, uuid(gpu), name="Mock H200")
        c.mem_update(gpu, other=gib * GiB)
        c.ctl("status")  # its footprint is counted before a asks to run
        crowd.append(c)
    a.send_raw(encode(ResumeRequest(0, 0)))
    resumed = a.expect(MessageType.RESUMED, timeout=10)
    assert bool(resumed.flags & RESUMED_MOVED) == moved
    assert [m for _, _, m in _steps(log) if m] == (["0>1,1>0"] if moved else [])


def test_a_client_that_goes_away_during_its_move_ends_the_order(node):
    sched, log = node()
    c = _client(sched)
    _held(c)
    assert _move(sched, c, 1)["clients"][0]["moving"]
    c.expect(MessageType.DROP_LOCK)
    c.close()  # gone before it let go
    poll(lambda: "given up: it went away" in sched.log(), 10, what="the order ended")
    with FakeClient(sched.socket) as other:  # the GPU it left is anyone's
        other.hello(flags=MOVABLE)
        other.attach(0, uuid(0), name="Mock H200")
        _held(other)
    assert "(a move to GPU 1)" not in sched.log(), "nothing was asked of a client that went away"
    assert _steps(log) == []


def _moved(sched, c: FakeClient, to: int):
    """Move idle c to GPU `to` as its library would answer, up to its new ATTACH."""
    assert _move(sched, c, to)["clients"][0]["moving"]
    c.expect(MessageType.SUSPEND)
    _ready(c)
    assert c.expect(MessageType.RESUMED, timeout=10).flags & RESUMED_MOVED
    c.attach(0, uuid(to), name="Mock H200")


@pytest.mark.parametrize("who_moves", ["the latency-sensitive client", "the bounded client"])
def test_a_queue_bound_goes_with_the_gpu_it_was_set_for(node, who_moves):
    sched, _ = node()
    sensitive = _client(sched, flags=MOVABLE | HELLO_LATENCY_SENSITIVE)
    bounded = _client(sched, flags=MOVABLE | HELLO_QUEUE_BOUND)
    assert bounded.expect(MessageType.QUEUE_BOUND).queue_us > 0  # beside a latency-sensitive one
    _moved(sched, sensitive if who_moves == "the latency-sensitive client" else bounded, 1)
    lifted = bounded.expect(MessageType.QUEUE_BOUND)
    assert (lifted.device, lifted.queue_us) == (0, 0), "nobody bounds it where it is now"
    assert bounded.nothing_sent()


def test_a_move_not_yet_suspending_its_client_ends_when_the_scheduler_stops(node):
    sched, log = node()
    c = _client(sched)
    _held(c)
    assert _move(sched, c, 1)["clients"][0]["moving"]
    c.expect(MessageType.DROP_LOCK)  # it has not let go: the order is at its first step
    sched.stop()
    assert "given up: the scheduler stops" in sched.log()
    assert "(a move to GPU 1)" not in sched.log() and _steps(log) == []
