"""One connection may ATTACH only the device ordinals a process can have (limits.max_ordinals: the
GPUs NVML reported plus MAX_MADE_UP_GPUS_PER_UID). It used to attach the same GPU under ordinals
0..199,999: every later `status` failed for everyone ("reply too large for one frame"), each
attempt holding the event loop for seconds, and the daemon's memory grew by 8 MB per 100,000.

The attacks run as another local user, as they would against a root scheduler. Nothing here sleeps
to show that something did not happen: the ERROR and the EOF, or a reply, are the witnesses.
"""

import os

import pytest

from sched_harness import FakeClient, GiB, as_user, registered, uuid
from xpushare.wire.protocol import Attach, MessageType, encode

NOBODY = 65534
ORDINALS = 16  # limits.max_ordinals(0): the test scheduler runs without NVML
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _attach(device: int, gpu_uuid: str) -> bytes:
    return encode(Attach(device, 0, gpu_uuid, "GPU", GiB, GiB))


def _every_ordinal_of_one_gpu(sock) -> tuple[int, str, bool]:
    """Attach GPU uuid(1) under ordinals 0, 1, 2, ... on one connection until refused: (how many
    were attached, the refusal, whether the scheduler then closed the connection)."""
    c = registered(sock, devices=())
    attached = 0
    for dev in range(ORDINALS * 4):
        c.send_raw(_attach(dev, uuid(1)))
        frame = c.recv(timeout=10)
        if frame is None or frame.type != MessageType.ATTACHED:
            break
        attached += 1
    assert frame is not None and frame.type == MessageType.ERROR, frame
    return attached, frame.decode(), c.closed_by_peer(10)


@needs_root
def test_a_connection_attaches_no_more_ordinals_than_a_process_can_have(scheduler):
    attached, refusal, closed = as_user(NOBODY, NOBODY, _every_ordinal_of_one_gpu, scheduler.sock)
    assert attached == ORDINALS
    assert f"device ordinal {ORDINALS}: a process has at most {ORDINALS} devices" in refusal
    assert closed
    with FakeClient(scheduler.sock) as root:
        st = root.ctl("status")
    assert st["ok"], st


def test_root_is_held_to_the_same_ordinals_and_ordinals_below_them_can_be_reattached(scheduler):
    with registered(scheduler.sock, devices=()) as c:
        for _ in range(3):  # the same ordinals again: no new entries
            for dev in range(ORDINALS):
                c.attach(dev, uuid(dev % 2))
        (me,) = scheduler.status()["clients"]
        assert sorted(d["device"] for d in me["gpus"]) == list(range(ORDINALS))
        c.send_raw(_attach(2**32 - 1, uuid(1)))
        assert c.expect(MessageType.ERROR).startswith(f"device ordinal {2**32 - 1}")
        assert c.closed_by_peer(10)
