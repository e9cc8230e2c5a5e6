"""WAITERS (node/waiters.py, docs/protocol.md "Idle locks"): a latency-sensitive holder that offered
HELLO_WAITERS is told, after its grant, whether anyone waits for its GPU, and again at each change;
any other holder is never told (one that stops being latency-sensitive is told 1); with
--suspend-idle every holder is told that others wait."""

from __future__ import annotations

from sched_harness import MessageType, registered

from xpushare.wire.protocol import HELLO_LATENCY_SENSITIVE, HELLO_WAITERS, Waiters

GiB = 1 << 30
SENSITIVE = HELLO_LATENCY_SENSITIVE | HELLO_WAITERS


def _granted(client, device: int = 0):
    client.mem_update(device, managed=GiB)
    client.request(device)
    client.expect(MessageType.LOCK_OK)


def _told(client) -> Waiters:
    return client.expect(MessageType.WAITERS)


def _gpu_status(admin, client) -> dict:
    (mine,) = [c for c in admin.ctl("status")["clients"] if c["client_id"] == client.client_id]
    return mine["gpus"][0]


def test_holders_are_told_when_someone_waits_and_when_nobody_does(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "serial")
    first = registered(sched.sock, flags=SENSITIVE)
    _granted(first)
    assert _told(first) == Waiters(0, 0)          # alone: keep the lock while idle
    old_library = registered(sched.sock)         # did not offer HELLO_WAITERS
    old_library.mem_update(0, managed=GiB)
    old_library.request(0)                        # serial: it waits
    assert _told(first) == Waiters(0, 1)
    first.release(0, reason=1)                    # its idle release lets the waiter in
    old_library.expect(MessageType.LOCK_OK)
    assert old_library.nothing_sent()             # never told: it releases as it always did
    first.request(0)                              # now the first waits: the holder is not told
    old_library.release(0, reason=1)
    first.expect(MessageType.LOCK_OK)
    assert _told(first) == Waiters(0, 0)          # nobody waits again: the change is sent
    assert first.nothing_sent()


def test_only_changes_are_sent(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "auto")
    a = registered(sched.sock, flags=SENSITIVE)
    _granted(a)
    assert _told(a) == Waiters(0, 0)
    a.release(0, reason=1)
    _granted(a)                                    # granted again, still nobody waits
    b = registered(sched.sock, flags=SENSITIVE)
    _granted(b)                                    # auto: both fit, nobody waits
    assert _told(b) == Waiters(0, 0)
    training = registered(sched.sock, flags=HELLO_WAITERS)  # offers it, is not latency-sensitive
    _granted(training)
    assert a.nothing_sent() and b.nothing_sent() and training.nothing_sent()


def test_a_client_that_stops_being_latency_sensitive_releases_idle_locks_again(start_scheduler):
    sched = start_scheduler("--no-nvml", "--mode", "auto")
    admin = registered(sched.sock, devices=())
    server = registered(sched.sock, flags=SENSITIVE)
    _granted(server)
    assert _told(server) == Waiters(0, 0)
    assert _gpu_status(admin, server)["keeps_idle_lock"] is True
    assert admin.ctl("set_latency_sensitive", value="off", client_id=server.client_id)["ok"]
    assert _told(server) == Waiters(0, 1)
    assert _gpu_status(admin, server)["keeps_idle_lock"] is False
    assert admin.ctl("set_latency_sensitive", value="on", client_id=server.client_id)["ok"]
    assert _told(server) == Waiters(0, 0)


def test_with_suspend_idle_every_holder_hears_that_others_wait(start_scheduler):
    sched = start_scheduler("--no-nvml", "--suspend-idle", "60")
    a = registered(sched.sock, flags=SENSITIVE)
    _granted(a)
    assert _told(a) == Waiters(0, 1)   # an idle lock kept would never count as idle
