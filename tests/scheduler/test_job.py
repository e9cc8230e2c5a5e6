"""JOB in the scheduler (docs/protocol.md, `job`): the record kept on the connection
(jobinfo.job_info, handlers.on_job) and the protocol's order, which a misbehaving client breaks
for its own connection only. The record is checked on stand-in connections; the order and the
WELCOME's feature bit against a live scheduler with raw protocol clients."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from sched_harness import FakeClient, MessageType, registered
from testkit.waiting import poll

from xpushare.wire.protocol import (
    FEATURE_JOBS, JOB_EXPLICIT, JOB_TORCH, JOB_UNKNOWN, Job, ProtocolError, encode,
)
from xpushare.scheduler.shell import handlers
from xpushare.scheduler.node import limits
from xpushare.scheduler.node.clientlog import ClientLog
from xpushare.scheduler.node.jobinfo import MAX_LOCAL_WORLD_SIZE, MAX_WORLD_SIZE, JobInfo, job_info

TORCH = Job(JOB_TORCH, "", 8, 4, 5, 1, "run-7", "10.0.0.1:29500")


def test_a_torch_job_is_kept_as_sent():
    info, dropped = job_info(TORCH)
    assert info == JobInfo(JOB_TORCH, "run-7", "10.0.0.1:29500", 8, 4, 5, 1) and dropped == []


def test_an_explicit_job_has_its_name_and_unknowns_as_none():
    info, dropped = job_info(Job(JOB_EXPLICIT, name="train-a"))
    assert info == JobInfo(JOB_EXPLICIT, "train-a", "", None, None, None, None) and dropped == []


def test_strings_are_decoded_with_bad_bytes_replaced_and_cut_at_a_nul():
    raw = bytearray(TORCH.pack())
    raw[20:31] = b"r\xffn\x00junk\x00xy"          # name: a bad byte, then a NUL mid-field
    info, _ = job_info(Job.unpack(bytes(raw)))
    assert info.name == "r\ufffdn"
    raw[148:276] = b"h" * 128                      # a full field has no NUL
    assert job_info(Job.unpack(bytes(raw)))[0].rendezvous == "h" * 128


@pytest.mark.parametrize("fields, expect, dropped", [
    (dict(world_size=MAX_WORLD_SIZE + 1, rank=3), (None, 4, 3, 1), ["world_size=1048577"]),
    (dict(local_world_size=MAX_LOCAL_WORLD_SIZE + 1, world_size=10**5), (10**5, None, 5, 1),
     ["local_world_size=4097"]),
    (dict(local_world_size=9), (8, None, 5, 1), ["local_world_size=9"]),   # more than the world
    (dict(rank=8, local_rank=4), (8, 4, None, None), ["rank=8", "local_rank=4"]),
    (dict(world_size=0, rank=JOB_UNKNOWN), (None, 4, None, 1), []),
])
def test_values_that_cannot_be_true_become_unknown(fields, expect, dropped):
    msg = Job(**{**TORCH.__dict__, **fields})
    info, out = job_info(msg)
    assert (info.world_size, info.local_world_size, info.rank, info.local_rank) == expect
    assert out == dropped


@pytest.mark.parametrize("msg, message", [
    (Job(0, name="x"), "unknown kind"),
    (Job(3, name="x"), "unknown kind"),
    (Job(JOB_EXPLICIT), "without a name"),
    (Job(JOB_TORCH, name="run", world_size=2), "without a rendezvous"),
])
def test_a_job_that_names_nothing_is_a_protocol_error(msg, message):
    with pytest.raises(ProtocolError, match=message):
        job_info(msg)


# -- the handler, on a stand-in connection -----------------------------------------------------

def _conn(hello=True, devices=()):
    return SimpleNamespace(hello=object() if hello else None, job_info=None, pid=1, id=1, uid=0,
                           privileged=True, devices=dict.fromkeys(devices),
                           warnings=limits.LogLimiter())


STATE = SimpleNamespace(client_log=ClientLog())  # what the JOB handler uses of the state


def test_the_handler_keeps_the_record_on_the_connection():
    conn = _conn()
    handlers.HANDLERS[MessageType.JOB](STATE, conn, TORCH)
    assert conn.job_info == job_info(TORCH)[0]
    with pytest.raises(ProtocolError, match="twice"):
        handlers.on_job(STATE, conn, TORCH)
    assert conn.job_info == job_info(TORCH)[0]     # the first one stays


@pytest.mark.parametrize("conn, message", [(_conn(hello=False), "HELLO"),
                                           (_conn(devices=[0]), "after ATTACH")])
def test_the_handler_refuses_a_job_out_of_order(conn, message):
    with pytest.raises(ProtocolError, match=message):
        handlers.on_job(None, conn, TORCH)
    assert conn.job_info is None


# -- a live scheduler ------------------------------------------------------------------------

def test_welcome_offers_jobs_and_a_job_before_attach_is_logged(scheduler):
    c = FakeClient(scheduler.socket)
    assert c.hello().features & FEATURE_JOBS
    c.send_raw(encode(TORCH))
    c.attach(0)                                    # still served: the JOB was accepted
    assert c.ctl("status")["ok"]
    line = "job pid=%d client=%d kind=torch name='run-7' at 10.0.0.1:29500 rank=5/8 local_rank=1/4"
    line %= (os.getpid(), c.client_id)
    poll(lambda: line in scheduler.logfile.read_text(), timeout=5, what=line)
    c.close()


@pytest.mark.parametrize("order", ["before HELLO", "twice", "after ATTACH"])
def test_a_job_out_of_order_closes_that_connection_only(scheduler, order):
    other = registered(scheduler.socket)
    c = FakeClient(scheduler.socket)
    if order != "before HELLO":
        c.hello()
    if order == "after ATTACH":
        c.attach(0)
    c.send_raw(encode(Job(JOB_EXPLICIT, name="a")))
    if order == "twice":
        c.send_raw(encode(Job(JOB_EXPLICIT, name="b")))
    assert c.closed_by_peer()
    assert other.ctl("status")["ok"]               # the other client and the daemon live on
    other.request(0)
    assert other.expect(MessageType.LOCK_OK).device == 0
    other.close()
