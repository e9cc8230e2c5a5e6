"""access.py: root in a pod other than the scheduler's own is not the node's admin (it may neither
change settings, nor see other users' command lines and pods, nor raise its own priority or
share); root outside any pod, or in the scheduler's own pod, is."""

from __future__ import annotations

from types import SimpleNamespace

from xpushare.scheduler.node import access


def _state(own_pod=None):
    return SimpleNamespace(config=SimpleNamespace(admin_gid=None),
                           pods=SimpleNamespace(own=lambda: own_pod))


def _conn(uid=0, pod=None):
    return SimpleNamespace(uid=uid, gid=uid, pid=12345, pod=pod, admin=None)


def test_root_in_another_pod_is_no_admin():
    state = _state(own_pod=SimpleNamespace(uid="sched-pod"))
    in_pod = _conn(pod=SimpleNamespace(uid="user-pod", namespace="ml", name="notebook"))
    assert not access.is_admin(state, in_pod)
    assert not access.may_raise_itself(state, in_pod)
    other = _conn(uid=2001)
    assert not access.viewer(state, in_pod).sees(other)


def test_root_in_a_pod_sees_its_own_pods_root_not_another_pods():
    """The same uid in another pod is another tenant: not listed, nor its pod's name as a job's
    label; a non-admin on the node sees its uid's processes on the node, not those in pods."""
    state = _state(own_pod=SimpleNamespace(uid="sched-pod"))
    pod_a, pod_b = SimpleNamespace(uid="pod-a"), SimpleNamespace(uid="pod-b")
    in_a = access.viewer(state, _conn(pod=pod_a))
    assert in_a.sees(_conn(pod=SimpleNamespace(uid="pod-a")))
    assert not in_a.sees(_conn(pod=pod_b)) and not in_a.sees(_conn())
    job_of_b = SimpleNamespace(key=("pod", "pod-b"), label="ml/trainer-b", members=[_conn(pod=pod_b)])
    assert in_a.job_label(job_of_b) is None
    assert access.viewer(state, _conn(pod=pod_b)).job_label(job_of_b) == "ml/trainer-b"
    on_node = access.viewer(state, _conn(uid=2001))
    assert on_node.sees(_conn(uid=2001)) and not on_node.sees(_conn(uid=2001, pod=pod_a))


def test_root_on_the_node_or_in_the_schedulers_own_pod_is_admin():
    state = _state(own_pod=SimpleNamespace(uid="sched-pod"))
    assert access.is_admin(state, _conn())
    assert access.is_admin(state, _conn(pod=SimpleNamespace(uid="sched-pod")))
    assert access.viewer(state, _conn()).sees(_conn(uid=2001))
    # a scheduler outside any pod: every pod is another
    assert not access.is_admin(_state(), _conn(pod=SimpleNamespace(uid="sched-pod")))


def test_a_user_in_no_pod_is_no_admin():
    assert not access.is_admin(_state(), _conn(uid=2001))


def test_root_in_another_pod_is_held_to_the_per_uid_caps_and_line_budget():
    """Exempt from the caps (connections, the fd reserve, made-up GPUs) and from the log budget is
    root on the node, not root in a tenant's pod."""
    from xpushare.scheduler.node.clientlog import ClientLog

    state = _state(own_pod=SimpleNamespace(uid="sched-pod"))
    pod = SimpleNamespace(uid="user-pod")
    assert not access.node_privileged(state, 0, pod)
    assert access.node_privileged(state, 0, None)
    assert access.node_privileged(state, 0, SimpleNamespace(uid="sched-pod"))
    assert not access.node_privileged(state, 2001, None)
    lines = ClientLog(lines=2, interval=60, clock=lambda: 0.0)
    tenant, node_root = SimpleNamespace(uid=0, privileged=False), SimpleNamespace(uid=0, privileged=True)
    assert [lines.info(tenant, "x") for _ in range(3)] == [True, True, False]
    assert all(lines.info(node_root, "x") for _ in range(3))


def test_admission_of_a_connection_not_node_privileged_counts_against_the_caps():
    from pathlib import Path

    from xpushare.scheduler.node.state import Config, SchedulerState

    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")))
    state.conn_room = 0  # the reserve: only the node's privileged get in
    assert state.admission(0, privileged=True) is None
    assert "open-file limit" in state.admission(0, privileged=False)


def test_the_claims_socket_lets_the_dra_plugins_pod_set_claims_and_nothing_else():
    """nvshare-dra-plugin runs in a pod of its own: through --claims-socket (a directory only its
    pod mounts) it may set and clear claims, unlimited by the per-uid request budget; through the
    scheduler's socket, which every GPU pod mounts, it is a tenant like any other."""
    import json
    from pathlib import Path

    from xpushare.scheduler.control import ops
    from xpushare.scheduler.node.state import Config, SchedulerState
    from xpushare.wire.protocol import FrameDecoder

    state = SchedulerState(Config(socket_path=Path("/nonexistent/s.sock")),
                           pods=SimpleNamespace(own=lambda: SimpleNamespace(uid="sched-pod")))

    def ask(claims_socket, op, **fields):
        conn = SimpleNamespace(uid=0, gid=0, pid=4242, pod=SimpleNamespace(uid="dra-pod"), admin=None,
                               claims_socket=claims_socket, id=7, privileged=claims_socket)
        decoder = FrameDecoder()
        decoder.feed(ops.handle(state, conn, {"op": op, **fields}))
        (frame,) = decoder.frames()
        return json.loads(frame.payload)

    claim = {"claim": "c0ffee00-0000-4000-8000-000000000001", "pod_uid": "u-1", "memory_limit": 8 << 30}
    refused = ask(False, "set_claim", **claim)
    assert not refused["ok"] and "permission denied" in refused["error"]
    assert ask(True, "set_claim", **claim) == {"ok": True, "clients": 0}
    assert state.quotas.claims["u-1"]
    assert not ask(True, "set_tq", seconds=5)["ok"]
    assert all(ask(True, "set_claim", **claim)["ok"] for _ in range(3 * access.REQUESTS_BURST))
    assert ask(True, "clear_claim", claim=claim["claim"]) == {"ok": True, "pods": 1}
