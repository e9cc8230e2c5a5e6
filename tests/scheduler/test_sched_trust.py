"""Nothing a client says changes what others get: the attacks any local user could make through the
0666 socket, on the real scheduler process, each of which worked before.

- GPUs made up by ATTACHing UUIDs NVML never reported were kept forever: 200 of them broke
  `nvsharectl status` for everyone ("reply too large for one frame"). Now a UUID must have the
  syntax of one, a uid may have MAX_MADE_UP_GPUS_PER_UID made-up GPUs known at once (root exempt),
  each goes with its last client, and status lists what fits.
- The first client to attach a GPU NVML does not know set its capacity for everybody: a tiny one
  made a later job see 1 MiB. Now a client's capacity applies to that client only.
- One LOCK_RELEASED claiming prefetch_us = 2^32-1 set the dynamic quantum to 120 s (and the eviction
  of a stopped holder to 240 s). Now one client's report cannot move it.

Nothing here sleeps to show that something did not happen: a reply on the same or another
connection, or the scheduler's state read through status, is the witness.
"""

import os
import re

import pytest

from sched_harness import FakeClient, GiB, as_user, registered, uuid
from testkit.waiting import poll
from xpushare.wire.protocol import DROP_EVICT, GRANT_PREFETCH, MessageType, ProtocolError

NOBODY = 65534
MiB = 1 << 20
CAP = 16  # limits.MAX_MADE_UP_GPUS_PER_UID
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _error_and_eof(c: FakeClient) -> str:
    """The ERROR text the scheduler sent, after which it closed the connection."""
    frame = c.recv(timeout=10)
    assert frame is not None and frame.type == MessageType.ERROR, frame
    assert c.closed_by_peer(10)
    return frame.decode()


# -- made-up GPUs ---------------------------------------------------------------------------------

def test_200_made_up_gpus_leave_status_answering_and_go_with_their_client(scheduler):
    # Root is exempt from the made-up cap, not from the ordinals one process can have: 200 GPUs
    # over connections of CAP ordinals each.
    attackers = [registered(scheduler.sock, devices=()) for _ in range(200 // CAP + 1)]
    try:
        for i in range(200):
            attackers[i // CAP].attach(i % CAP, uuid(1000 + i))
        with FakeClient(scheduler.sock) as other:
            st = other.ctl("status")
        assert st["ok"], st
        made = [g for g in st["gpus"] if g["index"] is None]
        assert 0 < len(made) and len(made) + st.get("gpus_not_listed", 0) == 200
        mine = [c for c in st["clients"] if c["client_id"] in {a.client_id for a in attackers}]
        assert sum(len(c["gpus"]) + c.get("gpus_not_listed", 0) for c in mine) == 200
        assert {d["uuid"] for c in mine for d in c["gpus"]} == {g["uuid"] for g in made}
    finally:
        for a in attackers:
            a.close()
    # Gone once the clients have left (their EOF is handled after the close, on another connection).
    poll(lambda: scheduler.status()["gpus"] == [], what="the made-up GPUs forgotten")
    assert scheduler.log().count("forgotten, its last client left") == 200


@pytest.mark.parametrize("bad", [
    "", "GPU-xyz", "gpu-00000000-0000-0000-0000-000000000001", "GPU-000000000000000000000000000000",
    "GPU-00000000-0000-0000-0000-00000000000g", "GPU-00000000-0000-0000-0000-0000000000001",
    "MIG-GPU-00000000-0000-0000-0000-000000000001/1/0", "GPU-00000000-0000-0000-0000-000000000001 ",
    "../../etc/passwd", "GPU-00000000-0000-0000-0000-000000000001\x01",
])
def test_an_attach_of_a_uuid_without_the_syntax_of_one_is_a_protocol_error(scheduler, bad):
    with registered(scheduler.sock, devices=()) as c:
        c.send_raw(_attach_frame(bad))
        assert "not a GPU UUID" in _error_and_eof(c)
    with registered(scheduler.sock, devices=()) as ok:  # the well-formed kinds, either case
        for dev, good in enumerate(("GPU-00000000-0000-0000-0000-0000000000AB",
                                    "MIG-7d1b5d9a-3f8d-5a5c-9a2b-2c9e8f0a1b2c")):
            assert ok.attach(dev, good, capacity=GiB).capacity == GiB
        assert [g["uuid"] for g in scheduler.status()["gpus"]] == [
            "GPU-00000000-0000-0000-0000-0000000000AB", "MIG-7d1b5d9a-3f8d-5a5c-9a2b-2c9e8f0a1b2c"]


def _attach_frame(text: str) -> bytes:
    from xpushare.wire.protocol import Attach, encode
    return encode(Attach(0, 0, text, "Mock GPU", 16 * GiB, 16 * GiB))


def _made_up_as_nobody(sock, known: str):
    """As another uid: CAP made-up GPUs on one connection, then on a second one a GPU already known
    (not counted) and one more made up (refused, closed); then, once the first has gone, one more."""
    first = registered(sock, devices=())
    for i in range(CAP):
        first.attach(i, uuid(2000 + i))
    second = registered(sock, devices=())
    known_capacity = second.attach(0, known, capacity=GiB).capacity
    second.send_raw(_attach_frame(uuid(2999)))
    refusal = _error_and_eof(second)
    status_with_first = first.ctl("status")
    first.close()
    later = poll(lambda: _try_attach(sock, uuid(3000)), what="room again once the first has gone")
    listed = sorted(g["uuid"] for g in status_with_first["gpus"])
    return known_capacity, refusal, listed, later


def _try_attach(sock, gpu_uuid):
    c = registered(sock, devices=())
    try:
        return c.attach(0, gpu_uuid).capacity
    except (AssertionError, ProtocolError, OSError):
        return None
    finally:
        c.close()


@needs_root
def test_one_uid_may_have_16_made_up_gpus_known_at_once(scheduler):
    with registered(scheduler.sock, devices=()) as root:
        root.attach(0, uuid(1))  # made up by root: known to nobody's clients
        known_capacity, refusal, listed, later = as_user(NOBODY, NOBODY, _made_up_as_nobody,
                                                         scheduler.sock, uuid(1))
    assert known_capacity == GiB
    assert f"uid {NOBODY} already has {CAP} GPUs" in refusal and uuid(2999) in refusal
    assert listed == sorted([uuid(1)] + [uuid(2000 + i) for i in range(CAP)])
    assert later == 16 * GiB
    assert "refusing ATTACH of pid=" in scheduler.log()


# -- capacity -------------------------------------------------------------------------------------

def test_a_tiny_capacity_from_the_first_attacher_does_not_change_what_a_later_client_gets(
        start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "auto", "--tq", "30")
    with registered(s.sock, devices=()) as attacker:
        assert attacker.attach(0, uuid(0), physical=MiB, capacity=MiB).capacity == MiB
        a, b = registered(s.sock, devices=()), registered(s.sock, devices=())
        assert a.attach(0, uuid(0)).capacity == 16 * GiB  # its own report, not the attacker's
        assert b.attach(0, uuid(0), capacity=8 * GiB).capacity == 8 * GiB
        (gpu,) = s.status()["gpus"]
        assert (gpu["capacity"], gpu["capacity_source"]) == (0, "unknown")
        # Auto admission does not use the attacker's 1 MiB: with the capacity unknown, both run.
        for c in (a, b):
            c.mem_update(managed=GiB)
            c.request()
            assert c.expect(MessageType.LOCK_OK).quantum_ms == 30_000
        a.close()
        b.close()


def test_the_scheduler_capacity_goes_to_every_client_whatever_they_report(start_scheduler):
    s = start_scheduler("--no-nvml", "--gpu-memory", f"{uuid(0)}=12GiB")
    with registered(s.sock, devices=()) as a, registered(s.sock, devices=()) as b:
        assert a.attach(0, uuid(0), physical=MiB, capacity=MiB).capacity == 12 * GiB
        assert b.attach(0, uuid(0)).capacity == 12 * GiB
        assert s.status()["gpus"][0]["capacity_source"] == "setting"
    poll(lambda: s.status()["gpus"] == [], what="the made-up GPU forgotten")
    with registered(s.sock, devices=()) as c:  # made up again: the command line applies again
        assert c.attach(0, uuid(0)).capacity == 12 * GiB


# -- the dynamic quantum --------------------------------------------------------------------------

def test_one_huge_prefetch_report_does_not_move_the_quantum_nor_stretch_an_eviction(
        start_scheduler):
    """Serial mode, the dynamic quantum, two clients whose memory does not fit together (so that
    A's grant after B carries PREFETCH, whose time it reports): one honest switch measures the
    quantum down to its 2 s floor; A then claims a prefetch of 2^32-1 us. The quantum stays 2 s,
    and A, stopped after a drop, is evicted two quanta later."""
    s = start_scheduler("--no-nvml", "--mode", "serial", "--gpu-memory", "10GiB", "--log-locks")
    a, b = registered(s.sock), registered(s.sock, priority=1)
    for c in (a, b):
        c.mem_update(managed=6 * GiB)
    a.request()
    assert a.expect(MessageType.LOCK_OK).quantum_ms == 5_000  # nothing measured yet
    b.request()                                              # preempts A, with EVICT
    assert a.expect(MessageType.DROP_LOCK).flags & DROP_EVICT
    a.release()
    assert b.expect(MessageType.LOCK_OK).quantum_ms == 2_000  # a fast handoff: the floor
    a.request()
    b.release(reason=1)
    grant = a.expect(MessageType.LOCK_OK)
    assert grant.flags & GRANT_PREFETCH and grant.quantum_ms == 2_000
    a.release(reason=1, prefetch_us=2**32 - 1, drain_us=2**32 - 1, evict_us=2**32 - 1)
    a.request()
    assert a.expect(MessageType.LOCK_OK).quantum_ms == 2_000
    (gpu,) = s.status()["gpus"]
    assert (gpu["tq"], gpu["tq_source"]) == (2.0, "dynamic") and gpu["switch_cost"] < 0.5
    b.request()                                              # A is dropped and stays silent
    assert a.expect(MessageType.DROP_LOCK).reason == 2
    assert b.expect(MessageType.LOCK_OK, timeout=15).quantum_ms == 2_000
    assert re.search(r"no LOCK_RELEASED 4\.\ds after DROP_LOCK", _error_and_eof(a))
    assert "drain=60000.0ms evict=60000.0ms prefetch=60000.0ms" in s.log()
    b.close()
