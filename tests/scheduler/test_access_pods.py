"""access.py: root in a pod other than the scheduler's own is not the node's admin (it may neither
change settings, nor see other users' command lines and pods, nor raise its own priority or
share); root outside any pod, or in the scheduler's own pod, is."""

from __future__ import annotations

from types import SimpleNamespace

from xpushare.scheduler import access


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


def test_root_on_the_node_or_in_the_schedulers_own_pod_is_admin():
    state = _state(own_pod=SimpleNamespace(uid="sched-pod"))
    assert access.is_admin(state, _conn())
    assert access.is_admin(state, _conn(pod=SimpleNamespace(uid="sched-pod")))
    assert access.viewer(state, _conn()).sees(_conn(uid=2001))
    # a scheduler outside any pod: every pod is another
    assert not access.is_admin(_state(), _conn(pod=SimpleNamespace(uid="sched-pod")))


def test_a_user_in_no_pod_is_no_admin():
    assert not access.is_admin(_state(), _conn(uid=2001))
