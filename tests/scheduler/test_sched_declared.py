"""What a process declares of itself, against another user's (issue 22, item 7; policy/declared.py):
a priority or a compute share above the default from a non-admin process counts as the default,
so it neither overtakes nor preempts another user's client, nor lengthens its own quanta against
it; lower values and an admin's settings still apply; and as declared it still orders its own
user's processes (policy/owners.py)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from sched_harness import ConnectedAs, registered
from testkit.waiting import poll
from xpushare.wire.protocol import MessageType, Settings, encode

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _client_of(status: dict, client_id: int) -> dict:
    return next(c for c in status["clients"] if c["client_id"] == client_id)


@needs_root
def test_a_declared_priority_does_not_overtake_or_preempt_another_user(scheduler):
    with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 2) as (holder, climber):
        holder.hello()
        holder.attach(0)
        holder.request()
        holder.expect(MessageType.LOCK_OK)
        victim = registered(scheduler.sock)
        victim.request()
        climber.hello(priority=1000)
        climber.attach(0)
        climber.request()
        # it waits behind the victim: its own user's holder was not preempted for it
        assert climber.nothing_sent() and holder.nothing_sent()
        me = _client_of(holder.ctl("status"), climber.client_id)
        assert me["priority"] == 0
        holder.release()
        assert victim.expect(MessageType.LOCK_OK)
        assert climber.nothing_sent()
        victim.release()
        climber.expect(MessageType.LOCK_OK)


@needs_root
def test_a_declared_priority_orders_its_own_users_processes_in_their_places(scheduler):
    with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 3) as (holder, first, urgent):
        for c, priority in ((holder, 0), (first, 0), (urgent, 1000)):
            c.hello(priority=priority)
            c.attach(0)
        holder.request()
        holder.expect(MessageType.LOCK_OK)
        first.request()                  # the user's place: first in the queue
        victim = registered(scheduler.sock)
        victim.request()                 # another user's: second
        urgent.request()                 # its user's other place: third
        assert urgent.nothing_sent()     # (its request is handled before the release below)
        holder.release()
        urgent.expect(MessageType.LOCK_OK)  # its user's first place, by its own priority
        urgent.release()
        victim.expect(MessageType.LOCK_OK)  # the other user's turn did not move
        victim.release()
        first.expect(MessageType.LOCK_OK)


@needs_root
def test_a_lower_priority_applies_and_an_admin_may_raise_one(scheduler):
    with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 1) as (low,):
        low.hello(priority=-5)
        low.attach(0)
        root = registered(scheduler.sock, priority=7)  # an admin's own process: as declared
        status = root.ctl("status")
        assert _client_of(status, low.client_id)["priority"] == -5
        assert _client_of(status, root.client_id)["priority"] == 7
        assert root.ctl("set_priority", priority=9, client_id=low.client_id)["ok"]
        assert _client_of(root.ctl("status"), low.client_id)["priority"] == 9


def _declare_share(client, share: float) -> None:
    client.hello()
    client.send_raw(encode(Settings(compute_share=round(share * 1000))))
    client.expect(MessageType.LIMITS)


def _shares(status: dict, *clients) -> list:
    return [_client_of(status, c.client_id)["quota"]["compute_share"] for c in clients]


@needs_root
def test_a_declared_share_does_not_lengthen_quanta_against_another_user(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "2")
    with ConnectedAs(NOBODY, NOBODY, sched.sock, 1) as (big,), \
            ConnectedAs(NOBODY - 1, NOBODY - 1, sched.sock, 1) as (small,):
        _declare_share(big, 1_000_000)
        _declare_share(small, 0.5)  # another user's: lowering is allowed
        first = registered(sched.sock)
        first.request()
        first.expect(MessageType.LOCK_OK)
        big.attach(0)
        big.request()
        other = registered(sched.sock)
        other.request()
        status = other.ctl("status")
        assert _shares(status, big, small) == [1.0, 0.5]  # a user's largest counts as the default
        first.release()
        # big and other contend with equal shares: big's quantum is the plain tq
        assert big.expect(MessageType.LOCK_OK).quantum_ms == 2000
        big.release()
        other.expect(MessageType.LOCK_OK)


@needs_root
def test_a_users_declared_shares_keep_their_ratio_as_its_processes_come_and_go(scheduler):
    """30 and 70 from one user's processes count as 0.43 and 1 (the largest at the default), so the
    two take the GPU 30:70 between them and no more of it against another user; when the 70 goes,
    the 30 alone counts as the default."""
    with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 2) as (thirty, plain):
        _declare_share(thirty, 30)
        plain.hello()  # declared nothing: the default
        other = registered(scheduler.sock)
        other.send_raw(encode(Settings(compute_share=500)))  # another user's, lowered: as declared
        other.expect(MessageType.LIMITS)
        with ConnectedAs(NOBODY, NOBODY, scheduler.sock, 1) as (seventy,):
            _declare_share(seventy, 70)
            status = other.ctl("status")
            assert _shares(status, thirty, seventy, plain) == [pytest.approx(30 / 70), 1.0, None]
            assert _shares(status, other) == [0.5]
        # the 70's process is gone (the with block ended it)
        assert poll(lambda: _shares(other.ctl("status"), thirty) == [1.0])


class _Conn:
    """What Quotas reads of a connection (connection.Conn's fields)."""

    def __init__(self, n: int, uid: int, pod: str | None):
        from xpushare.scheduler.node.quotas import Quota
        self.id, self.pid, self.uid, self.gid, self.admin = n, 1000 + n, uid, uid, None
        self.pod = SimpleNamespace(uid=pod, namespace="ns", name=pod) if pod else None
        self.closed, self.hello, self.quota_set, self.quota_sent = False, object(), {}, None
        self.quota_env, self.quota = None, Quota()
        self.latency_env = False

    def send(self, data) -> None:
        pass

    def gpus(self) -> list:
        return []


def test_pods_of_one_uid_scale_their_declared_shares_apart():
    """In Kubernetes many tenants' pods run as root: one pod's declaration must not scale another's
    (a pod declaring 1000000 would leave every other root pod's declared share near nothing)."""
    from xpushare.scheduler.node.quotas import Quotas

    state = SimpleNamespace(config=SimpleNamespace(admin_gid=None),
                            pods=SimpleNamespace(own=lambda: None),
                            client_log=SimpleNamespace(info=lambda *a, **k: True))
    quotas = Quotas(state)
    greedy, modest, sibling = _Conn(1, 0, "pod-a"), _Conn(2, 0, "pod-b"), _Conn(3, 0, "pod-b")
    for conn, share in ((greedy, 1_000_000), (modest, 30), (sibling, 70)):
        quotas.settings(conn, Settings(compute_share=share * 1000))
    assert greedy.quota.compute_share == 1.0
    assert (modest.quota.compute_share, sibling.quota.compute_share) == (pytest.approx(30 / 70), 1.0)
    quotas.forget(sibling)
    assert modest.quota.compute_share == 1.0 and quotas.declared.keys() == {("pod", "pod-a"),
                                                                            ("pod", "pod-b")}
    quotas.forget(greedy)
    assert ("pod", "pod-a") not in quotas.declared
