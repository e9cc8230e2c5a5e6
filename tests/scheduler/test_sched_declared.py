"""What a process declares of itself, against another user's (issue 22, item 7; policy/declared.py):
a priority or a compute share above the default from a non-admin process counts as the default,
so it neither overtakes nor preempts another user's client, nor lengthens its own quanta against
it; lower values and an admin's settings still apply; and as declared it still orders its own
user's processes (policy/owners.py)."""

from __future__ import annotations

import os

import pytest

from sched_harness import ConnectedAs, registered
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


@needs_root
def test_a_declared_share_does_not_lengthen_quanta_against_another_user(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "2")
    with ConnectedAs(NOBODY, NOBODY, sched.sock, 2) as (big, small):
        big.hello()
        big.send_raw(encode(Settings(compute_share=1_000_000_000)))  # a share of 1,000,000
        big.expect(MessageType.LIMITS)
        small.hello()
        small.send_raw(encode(Settings(compute_share=500)))  # 0.5: lowering is allowed
        small.expect(MessageType.LIMITS)
        first = registered(sched.sock)
        first.request()
        first.expect(MessageType.LOCK_OK)
        big.attach(0)
        big.request()
        other = registered(sched.sock)
        other.request()
        status = other.ctl("status")
        assert _client_of(status, big.client_id)["quota"]["compute_share"] is None
        assert _client_of(status, small.client_id)["quota"]["compute_share"] == 0.5
        first.release()
        # big and other contend with equal shares: big's quantum is the plain tq
        assert big.expect(MessageType.LOCK_OK).quantum_ms == 2000
        big.release()
        other.expect(MessageType.LOCK_OK)
