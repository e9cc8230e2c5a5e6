"""Who may name a client latency-sensitive (docs/protocol.md, "Latency-sensitive clients"): the
trust rule of priorities. A process's own NVSHARE_LATENCY_SENSITIVE (HELLO's flag) counts only from
an admin's process; an admin's nvsharectl, a pod annotation and a DRA claim apply as they are, the
most recent of them winning as for quotas; status shows what counts and what was declared."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from sched_harness import SRC, ConnectedAs, child_env, registered
from test_quotas import KEY, POD, _Conn, _quotas

from xpushare.kubernetes.dra import claims
from xpushare.kubernetes.pod_settings import LATENCY_SENSITIVE, parse_annotations
from xpushare.scheduler.policy import claimed_latency_sensitive
from xpushare.wire.protocol import HELLO_LATENCY_SENSITIVE

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
CLAIM = "c0ffee00-0000-4000-8000-000000000001"


@pytest.mark.parametrize("declared, governed, counts", [
    (False, False, False), (False, True, False),   # nothing asked: nothing counts
    (True, False, False),                          # a user's own process: not over other users
    (True, True, True),                            # an admin's process
])
def test_a_declaration_counts_only_when_governed(declared, governed, counts):
    assert claimed_latency_sensitive(declared, governed) is counts


def _client_of(status: dict, client_id: int) -> dict:
    return next(c for c in status["clients"] if c["client_id"] == client_id)


def test_an_admins_process_may_declare_itself_and_status_shows_it(scheduler):
    me = registered(scheduler.sock, flags=HELLO_LATENCY_SENSITIVE)
    plain = registered(scheduler.sock)
    status = me.ctl("status")
    mine = _client_of(status, me.client_id)
    assert mine["latency_sensitive"] and mine["declared_latency_sensitive"]
    assert mine["quota"]["sources"]["latency_sensitive"] == "environment"
    assert not _client_of(status, plain.client_id)["latency_sensitive"]


@needs_root
def test_another_users_declaration_counts_as_not_sensitive(scheduler):
    with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 1) as (climber,):
        climber.hello(flags=HELLO_LATENCY_SENSITIVE)
        climber.attach(0)
        mine = _client_of(registered(scheduler.sock).ctl("status"), climber.client_id)
        assert mine["declared_latency_sensitive"] and not mine["latency_sensitive"]
        # nor may it set itself live: that is an admin's operation
        refused = climber.ctl("set_latency_sensitive", value="on", client_id=climber.client_id)
        assert not refused["ok"] and "permission" in refused["error"]


def test_nvsharectl_sets_it_live_and_takes_it_away(scheduler):
    c = registered(scheduler.sock)
    run = [sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(scheduler.sock),
           "--set-latency-sensitive", "on", "--client", str(c.client_id)]
    out = subprocess.run(run, capture_output=True, text=True, env=child_env(), timeout=30)
    assert out.returncode == 0, out.stderr
    assert "latency-sensitive of client" in out.stdout
    mine = _client_of(c.ctl("status"), c.client_id)
    assert mine["latency_sensitive"] and mine["quota"]["sources"]["latency_sensitive"] == "nvsharectl"
    assert c.ctl("set_latency_sensitive", value="off", client_id=c.client_id)["ok"]
    assert not _client_of(c.ctl("status"), c.client_id)["latency_sensitive"]
    bad = c.ctl("set_latency_sensitive", value="maybe", client_id=c.client_id)
    assert not bad["ok"]
    bad_flag = subprocess.run(run[:-3] + ["sure", "--client", "1"], capture_output=True, text=True,
                              env=child_env(), timeout=30)
    assert bad_flag.returncode == 2 and "usage" in bad_flag.stderr


def test_the_pod_annotation_and_a_claim_set_it_the_most_recent_winning():
    conn = _Conn(POD)
    q = _quotas(conn)
    settings, problems = parse_annotations({LATENCY_SENSITIVE: "true"})
    assert not problems and settings.latency_sensitive is True
    q.pod_changed(KEY, settings)
    quota, sources = q.effective(conn)
    assert quota.latency_sensitive and sources["latency_sensitive"] == "annotation"
    q.set_clients([conn], "latency_sensitive", False)              # an operator after it
    assert q.effective(conn)[0].latency_sensitive is False
    q.set_claim(POD.uid, CLAIM, {"latency_sensitive": True})        # the claim, later still
    assert q.effective(conn) [1]["latency_sensitive"] == "claim"
    assert q.effective(conn)[0].latency_sensitive is True


def test_a_bad_annotation_is_a_problem_and_sets_nothing():
    settings, problems = parse_annotations({LATENCY_SENSITIVE: "very"})
    assert settings.latency_sensitive is None and "latency-sensitive" in problems[0].message
    off, none = parse_annotations({LATENCY_SENSITIVE: "False"})
    assert off.latency_sensitive is False and not none


def test_a_claim_parameter_reaches_the_plan():
    from tests.kubernetes.dra_fakes import DRIVER, NODE, FakeGpu, FakeNvml, GPU_A, claim, gpu_config, result
    from xpushare.kubernetes.dra import inventory as inv
    specs = inv.device_specs(inv.discover(FakeNvml(FakeGpu(GPU_A))), inv.Publishing())
    plan = claims.plan(claim(results=[result()], config=[gpu_config(latencySensitive=True)]),
                       DRIVER, NODE, specs, lambda uuid: True)
    assert plan.limits.latency_sensitive is True
    with pytest.raises(claims.ClaimError, match="latencySensitive"):
        claims.plan(claim(results=[result()], config=[gpu_config(latencySensitive="yes")]),
                    DRIVER, NODE, specs, lambda uuid: True)
    assert claims.plan(claim(results=[result()]), DRIVER, NODE, specs,
                       lambda uuid: True).limits.latency_sensitive is None


# -- the queue bound the others are sent (node/latency.py) -----------------------------------------
from sched_harness import MessageType  # noqa: E402
from xpushare.wire.protocol import HELLO_QUEUE_BOUND, QueueBound  # noqa: E402


def _bound(client) -> int:
    frame = client.recv()
    assert frame is not None and frame.type == MessageType.QUEUE_BOUND, frame
    return QueueBound.unpack(frame.payload)


def test_the_others_of_the_gpu_are_bounded_while_a_latency_sensitive_client_is_attached(start_scheduler):
    sched = start_scheduler("--no-nvml", "--latency-queue-ms", "1.5")
    training = registered(sched.sock, flags=HELLO_QUEUE_BOUND)
    old_library = registered(sched.sock)                  # did not offer HELLO_QUEUE_BOUND
    elsewhere = registered(sched.sock, devices=(), flags=HELLO_QUEUE_BOUND)
    elsewhere.attach(0, gpu_uuid="GPU-00000000-0000-0000-0000-000000000009")
    assert training.nothing_sent()                        # nobody latency-sensitive: nothing
    server = registered(sched.sock, flags=HELLO_LATENCY_SENSITIVE | HELLO_QUEUE_BOUND)
    assert _bound(training) == QueueBound(0, 1500)
    late = registered(sched.sock, flags=HELLO_QUEUE_BOUND)  # attaches while it is there
    assert _bound(late) == QueueBound(0, 1500)
    assert server.nothing_sent() and old_library.nothing_sent() and elsewhere.nothing_sent()
    server.close()                                        # the last one leaves: lifted
    assert _bound(training) == QueueBound(0, 0) and _bound(late) == QueueBound(0, 0)
    # nvsharectl makes one live, and takes it away
    assert elsewhere.ctl("set_latency_sensitive", value="on", client_id=late.client_id)["ok"]
    assert _bound(training) == QueueBound(0, 1500)
    assert elsewhere.ctl("set_latency_sensitive", value="off", client_id=late.client_id)["ok"]
    assert _bound(training) == QueueBound(0, 0)
    assert late.nothing_sent()


@pytest.mark.parametrize("flag, value, said", [
    ("--latency-queue-ms", "0", "0.1 to 1000"),
    ("--latency-hold-ms", "0.01", "0 or a number of milliseconds"),
])
def test_a_bad_latency_flag_is_refused(tmp_path, flag, value, said):
    run = subprocess.run([sys.executable, "-m", "xpushare.scheduler", flag, value,
                          "--socket", str(tmp_path / "s.sock")], capture_output=True, text=True,
                         env=child_env(), timeout=30)
    assert run.returncode == 2 and said in run.stderr
