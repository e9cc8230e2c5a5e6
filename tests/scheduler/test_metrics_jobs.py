"""Jobs in status and in the exporter (docs/metrics.md, Jobs) against a live scheduler and raw
protocol clients that send JOB: a job appears with its members and GPUs, follows its state, and
goes when it is down to one member on one GPU; a process alone has no job series.

Each scrape follows a status round trip, which the scheduler answers after what came before it."""

from __future__ import annotations

import os

from sched_harness import FakeClient, MessageType, registered
from test_metrics import metrics_scheduler, scrape, value  # noqa: F401 (a fixture)
from testkit.waiting import poll

from xpushare.wire.protocol import JOB_EXPLICIT, Job, encode

TRAIN = {"job_name": "train", "kind": "name"}


def member(sock, device: int, name: str = "train", **sizes) -> FakeClient:
    c = FakeClient(sock)
    c.hello()
    c.send_raw(encode(Job(JOB_EXPLICIT, name=name, **sizes)))
    c.attach(device)
    return c


def test_a_named_job_of_two_members_shows_until_one_leaves(metrics_scheduler):
    sched, port = metrics_scheduler
    lone = registered(sched.socket)   # a process alone: no job, in status or in the metrics
    a, b = member(sched.socket, 0), member(sched.socket, 1)
    status = b.ctl("status")
    assert status["jobs"] == [{"job": "train", "kind": "name", "uid": os.getuid(), "state": "idle",
                               "formed": True,
                               "size": None, "members": [os.getpid()] * 2,
                               "gpus": sorted(g["uuid"] for g in status["gpus"])}]
    jobs = {c["client_id"]: c["job"] for c in status["clients"]}
    assert jobs == {lone.client_id: None, a.client_id: "train", b.client_id: "train"}
    s = scrape(port)
    assert value(s, "xpushare_job_members", **TRAIN) == 2
    assert value(s, "xpushare_job_gpus", **TRAIN) == 2
    assert value(s, "xpushare_job_state_info", **TRAIN, state="idle") == 1
    assert len(s["xpushare_job_members"]) == 1          # none for the process alone

    a.request(0)                                       # the job takes both GPUs, then a runs
    a.expect(MessageType.LOCK_OK)
    a.ctl("status")
    s = scrape(port)
    assert [lab["state"] for lab, _ in s["xpushare_job_state_info"]] == ["running"]

    b.close()
    poll(lambda: a.ctl("status")["jobs"] == [], timeout=5, what="the job gone from status")
    assert a.ctl("status")["clients"][1]["job"] is None
    s = scrape(port)
    for name in ("xpushare_job_members", "xpushare_job_gpus", "xpushare_job_state_info"):
        assert name not in s, s.get(name)
    a.close()
    lone.close()


def test_a_job_of_known_size_shows_while_it_forms(metrics_scheduler):
    sched, port = metrics_scheduler
    a = member(sched.socket, 0, name="sized", world_size=3)
    [job] = a.ctl("status")["jobs"]
    assert (job["job"], job["size"], job["formed"], job["members"]) == \
        ("sized", 3, False, [os.getpid()])
    s = scrape(port)
    labels = {"job_name": "sized", "kind": "name"}
    assert value(s, "xpushare_job_members", **labels) == 1
    assert value(s, "xpushare_job_gpus", **labels) == 1
    assert value(s, "xpushare_job_state_info", **labels, state=job["state"]) == 1
    a.close()
