"""Quotas in the scheduler (quotas.py, docs/protocol.md SETTINGS/LIMITS): where a client's compute
limit, compute share and memory limit come from (the environment in SETTINGS, the pod's annotations,
nvsharectl), which one applies (the most recent of the last two, else the environment), and where
they go (LIMITS to the library, the share to the arbiters, status and the exporter).

The precedence is checked on Quotas with stand-in connections (a pod needs a cgroup); the wire, the
control ops and the views against a live scheduler with raw protocol clients."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from sched_harness import GiB, MessageType, registered, uuid
from test_metrics import metrics_scheduler, scrape, value  # noqa: F401  (fixture)
from testkit.waiting import poll

from xpushare.kubernetes.pod_settings import PodKey, parse_annotations
from xpushare.wire.protocol import FEATURE_QUOTAS, Limits, Settings, encode
from xpushare.scheduler.node.clientlog import ClientLog
from xpushare.scheduler.node.quotas import Quota, Quotas


# -- precedence, on Quotas alone ---------------------------------------------------------------

class _Conn:
    """What Quotas reads of a connection; `sent` collects the frames it is sent."""
    closed = False
    hello = object()
    pid = id = 1
    uid = 0
    privileged = True
    latency_env = False

    def __init__(self, pod=None, env: Quota | None = Quota()):
        self.pod, self.quota_env, self.quota_set = pod, env, {}
        self.quota, self.quota_sent, self.sent = Quota(), None, []

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)

    def gpus(self):
        return set()


def _quotas(*conns):
    return Quotas(SimpleNamespace(clients=lambda: list(conns), client_log=ClientLog()))


POD = SimpleNamespace(uid="u-1", namespace="ns", name="web")
KEY = PodKey("u-1", "ns", "web")


def _notes(**annotations):
    settings, problems = parse_annotations({f"nvshare.com/gpu-{k.replace('_', '-')}": v
                                            for k, v in annotations.items()})
    assert not problems
    return settings


def test_the_environment_applies_until_something_else_sets_a_field():
    conn = _Conn(POD, Quota(compute_limit=0.5, compute_share=2.0, memory_limit=GiB))
    q = _quotas(conn)
    assert q.effective(conn) == (Quota(0.5, 2.0, GiB), dict.fromkeys(
        ("compute_limit", "compute_share", "memory_limit", "latency_sensitive"), "environment"))


@pytest.mark.parametrize("order, expect", [
    (("annotation", "ctl"), (0.25, "nvsharectl")),      # a command after the annotation wins
    (("ctl", "annotation"), (0.75, "annotation")),      # an annotation edited after it wins
])
def test_the_most_recent_of_annotation_and_nvsharectl_applies(order, expect):
    conn = _Conn(POD, Quota(compute_limit=0.5))
    q = _quotas(conn)
    for step in order:
        if step == "annotation":
            q.pod_changed(KEY, _notes(compute_limit="75"))
        else:
            q.set_clients([conn], "compute_limit", 0.25)
    quota, sources = q.effective(conn)
    assert (quota.compute_limit, sources["compute_limit"]) == expect


def test_an_unchanged_annotation_does_not_undo_a_later_command():
    conn = _Conn(POD)
    q = _quotas(conn)
    q.pod_changed(KEY, _notes(compute_limit="75", compute_share="3"))
    q.set_clients([conn], "compute_limit", 0.25)
    q.pod_changed(KEY, _notes(compute_limit="75", compute_share="4"))   # only the share edited
    quota, sources = q.effective(conn)
    assert (quota.compute_limit, quota.compute_share) == (0.25, 4.0)
    assert sources == {"compute_limit": "nvsharectl", "compute_share": "annotation",
                       "memory_limit": "environment", "latency_sensitive": "environment"}


def test_none_is_a_value_and_a_removed_annotation_falls_back_to_the_environment():
    conn = _Conn(POD, Quota(memory_limit=GiB))
    q = _quotas(conn)
    q.pod_changed(KEY, _notes(memory_limit="none"))
    assert q.effective(conn)[0].memory_limit is None
    q.pod_removed(KEY)
    assert q.effective(conn)[0].memory_limit == GiB


def test_a_pod_setting_reaches_its_clients_now_and_later_and_no_other_pod():
    mine, other = _Conn(POD), _Conn(SimpleNamespace(uid="u-2", namespace="ns", name="db"))
    q = _quotas(mine, other)
    assert q.set_pod("ns", "web", "memory_limit", 2 * GiB) == [mine]
    later = _Conn(SimpleNamespace(uid="u-1", namespace="ns", name="web"))
    assert q.effective(later)[0].memory_limit == 2 * GiB
    assert q.effective(other)[0].memory_limit is None


def test_limits_go_out_only_when_they_change_and_only_to_a_client_that_sent_settings():
    new, old = _Conn(POD), _Conn(POD, env=None)
    q = _quotas(new, old)
    q.settings(new, Settings(compute_limit=500))
    assert new.sent == [encode(Limits(500, 0, 0))]
    q.set_clients([new, old], "compute_share", 2.0)                       # no limit changed
    q.set_clients([new, old], "memory_limit", GiB)
    assert new.sent[1:] == [encode(Limits(500, 0, GiB))] and old.sent == []


# -- the wire, the ops and the views against a live scheduler -----------------------------------

def _limits(client) -> Limits:
    return client.expect(MessageType.LIMITS)


def test_settings_are_answered_with_limits_and_nvsharectl_changes_them_live(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "30")
    a = registered(sched.socket)
    assert a.hello_reply.features & FEATURE_QUOTAS
    a.send_raw(encode(Settings(compute_limit=250, compute_share=0, memory_limit=4 * GiB)))
    assert _limits(a) == Limits(250, 0, 4 * GiB)
    assert sched.ctl("set_compute_limit", value=50, pid=os.getpid())["ok"]
    assert _limits(a) == Limits(500, 0, 4 * GiB)
    assert sched.ctl("set_memory_limit", value="none", client_id=a.client_id)["ok"]
    assert _limits(a) == Limits(500, 0, 0)
    quota = sched.ctl("status")["clients"][0]["quota"]
    assert quota["compute_limit"] == 50 and quota["memory_limit"] is None
    assert quota["sources"] == {"compute_limit": "nvsharectl", "compute_share": "environment",
                                "memory_limit": "nvsharectl", "latency_sensitive": "environment"}


def test_a_client_without_settings_is_never_sent_limits(start_scheduler):
    sched = start_scheduler("--no-nvml")
    a = registered(sched.socket)
    assert sched.ctl("set_compute_limit", value=30, client_id=a.client_id)["ok"]
    a.ctl("ping")   # a round trip after the op: anything sent before it would be read first
    assert a.nothing_sent()
    assert sched.ctl("status")["clients"][0]["quota"]["applied_by_client"] is False


def test_settings_out_of_range_close_that_connection_only(start_scheduler):
    sched = start_scheduler("--no-nvml")
    a, b = registered(sched.socket), registered(sched.socket)
    a.send_raw(encode(Settings(compute_limit=1001)))
    assert a.expect(MessageType.ERROR) and a.closed_by_peer()
    assert b.ctl("ping")["ok"]


@pytest.mark.parametrize("op, fields, error", [
    ("set_compute_limit", {"value": 0.09, "pid": 1}, "from 0.1 to 100"),
    ("set_compute_limit", {"value": 101, "pid": 1}, "from 0.1 to 100"),
    ("set_compute_share", {"value": -1, "pid": 1}, "from 0.001 to 1000000"),
    ("set_memory_limit", {"value": "4GiB", "pid": 1}, "bytes"),
    ("set_compute_share", {"value": 2, "pod": "NS/web"}, "NAMESPACE/NAME"),
    ("set_compute_share", {"value": 2}, "needs a pid or a client_id or a pod"),
    ("set_compute_share", {"value": 2, "pid": 99999999}, "no client with pid"),
])
def test_quota_ops_refuse_bad_values_with_a_clear_error(start_scheduler, op, fields, error):
    sched = start_scheduler("--no-nvml")
    reply = sched.ctl(op, **fields)
    assert not reply["ok"] and error in reply["error"], reply


def test_a_share_reaches_the_arbiter_and_the_views(metrics_scheduler):  # noqa: F811
    sched, port = metrics_scheduler
    a = registered(sched.socket)
    a.send_raw(encode(Settings(compute_share=3000, memory_limit=GiB)))
    _limits(a)
    a.mem_update(managed=2 * GiB)
    a.request()
    a.expect(MessageType.LOCK_OK)
    st = sched.ctl("status")
    assert st["gpus"][0]["holders"][0]["share"] == 3.0
    client = st["clients"][0]
    assert client["quota"]["compute_share"] == 3.0 and client["gpus"][0]["over_memory_limit"]
    me = {"gpu": "", "uuid": uuid(0), "client": str(a.client_id)}
    assert value(scrape(port), "xpushare_client_compute_share", **me) == 3.0
    assert value(scrape(port), "xpushare_client_memory_limit_bytes", **me) == GiB
    assert value(scrape(port), "xpushare_client_compute_limit_ratio", **me) is None   # none set
    assert sched.ctl("set_compute_limit", value=40, client_id=a.client_id)["ok"]
    poll(lambda: value(scrape(port), "xpushare_client_compute_limit_ratio", **me) == 0.4, 5, 0.05,
         what="the limit in the exporter")
