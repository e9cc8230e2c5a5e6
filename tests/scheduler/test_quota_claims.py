"""The "claim" quota source (quotas.py): the limits nvshare-dra-plugin sends for a pod's prepared
DRA ResourceClaim (set_claim / clear_claim). A claimed field is not taken from the pod's
annotations (the cluster placed the pod by what it claimed); an operator's nvsharectl after it
still applies; clearing the claim falls back to what was there before."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sched_harness import GiB
from test_quotas import KEY, POD, _Conn, _notes, _quotas

from xpushare.scheduler.node.quotas import Quota

CLAIM, POD_UID = "c0ffee00-0000-4000-8000-000000000001", "u-1"


def test_a_claim_sets_its_fields_and_names_itself_the_source():
    conn = _Conn(POD, Quota(compute_limit=0.9, compute_share=2.0))
    q = _quotas(conn)
    assert q.set_claim(POD_UID, CLAIM, {"compute_limit": 0.3, "memory_limit": 8 * GiB}) == [conn]
    quota, sources = q.effective(conn)
    assert quota == Quota(0.3, 2.0, 8 * GiB)
    assert sources == {"compute_limit": "claim", "compute_share": "environment", "memory_limit": "claim",
                       "latency_sensitive": "environment"}


def test_an_annotation_does_not_raise_a_claimed_field_but_sets_the_others():
    conn = _Conn(POD)
    q = _quotas(conn)
    q.set_claim(POD_UID, CLAIM, {"memory_limit": 8 * GiB})
    q.pod_changed(KEY, _notes(memory_limit="80GiB", compute_limit="50"))   # after the claim
    quota, sources = q.effective(conn)
    assert (quota.memory_limit, sources["memory_limit"]) == (8 * GiB, "claim")
    assert (quota.compute_limit, sources["compute_limit"]) == (0.5, "annotation")


def test_nvsharectl_after_the_claim_wins_and_a_resent_claim_does_not_undo_it():
    conn = _Conn(POD)
    q = _quotas(conn)
    q.set_claim(POD_UID, CLAIM, {"compute_limit": 0.3})
    q.set_clients([conn], "compute_limit", 0.6)
    q.set_claim(POD_UID, CLAIM, {"compute_limit": 0.3})        # the plugin re-sends after a restart
    assert q.effective(conn)[0].compute_limit == 0.6
    q.set_claim(POD_UID, CLAIM, {"compute_limit": 0.2})        # a changed value is new
    assert q.effective(conn)[0].compute_limit == 0.2


def test_clearing_the_claim_falls_back_and_touches_no_other_pod():
    mine = _Conn(POD, Quota(memory_limit=GiB))
    other = _Conn(SimpleNamespace(uid="u-2", namespace="ns", name="db"))
    q = _quotas(mine, other)
    q.set_claim(POD_UID, CLAIM, {"memory_limit": 8 * GiB})
    assert q.effective(other)[0].memory_limit is None
    assert q.clear_claim(CLAIM) == 1 and q.clear_claim(CLAIM) == 0
    assert q.effective(mine) == (Quota(memory_limit=GiB), dict.fromkeys(
        ("compute_limit", "compute_share", "memory_limit", "latency_sensitive"), "environment"))


def test_the_claim_ops_on_a_live_scheduler(start_scheduler):
    sched = start_scheduler("--no-nvml")
    reply = sched.ctl("set_claim", claim=CLAIM, pod_uid=POD_UID, compute_limit=30, memory_limit=8 * GiB,
                      compute_share=2)
    assert reply == {"ok": True, "clients": 0}
    assert sched.ctl("clear_claim", claim=CLAIM) == {"ok": True, "pods": 1}
    assert sched.ctl("clear_claim", claim=CLAIM) == {"ok": True, "pods": 0}


@pytest.mark.parametrize("fields, error", [
    ({"claim": "a/b", "pod_uid": POD_UID}, "Kubernetes UID"),
    ({"claim": CLAIM}, "needs pod_uid"),
    ({"claim": CLAIM, "pod_uid": POD_UID, "compute_limit": 0}, "from 0.1 to 100"),
    ({"claim": CLAIM, "pod_uid": POD_UID, "memory_limit": "8GiB"}, "bytes"),
])
def test_set_claim_refuses_bad_fields(start_scheduler, fields, error):
    sched = start_scheduler("--no-nvml")
    reply = sched.ctl("set_claim", **fields)
    assert not reply["ok"] and error in reply["error"], reply
