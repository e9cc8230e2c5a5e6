"""What status and top show, to whom, and what asking for them costs others (access.py,
statusreply.py), on the real scheduler process, attacked as another local user:

- Status showed every client's full command line (a `--db-password` argument was readable by any
  user) and pod. Now a non-admin sees its own processes in full, others' not at all (counted, per
  GPU with their bytes), and no pod's name as a job label; an admin sees everything.
- Each of twenty users asking for status got, and the scheduler built, the whole node (1.8 MB at
  255 clients on 20 GPUs). Now a non-admin's reply lists its own clients only: its size does not
  grow with other users' clients.
- A status of many clients was built in one piece, holding the event loop (86 ms at 255 clients on
  20 GPUs) while lock requests waited. Now it is built a slice at a time: a lock request sent after
  a status request is granted before that status reply has been sent.
- Any user could ask for status in a loop. Now a non-admin uid's control requests come from a token
  bucket (access.REQUESTS_BURST at once), with a refusal that says so.

Nothing here sleeps to show that something did not happen: replies, and the order in which they
arrive, are the witnesses.
"""

import contextlib
import io
import json
import os
import select
import subprocess
import sys
import time

import pytest

from sched_harness import ConnectedAs, FakeClient, as_user, child_env, registered, uuid
from xpushare.cli import ctl, ctl_render, ctl_top  # noqa: F401  (imported while the stdlib is readable)
from xpushare.wire.protocol import MessageType, encode_json
from xpushare.scheduler.node.access import REQUESTS_BURST

GiB = 1 << 30

NOBODY = 65534
SECRET = "--db-password=hunter2"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
STATUS = encode_json(MessageType.CTL_REQUEST, {"op": "status"})

# A client process of root's whose command line carries a secret, in a pod (HELLO's hint). The code
# comes through the environment so that the secret sits early in the command line, inside status's
# COMMAND_MAX characters however long the checkout's paths are.
VICTIM = ("import sys; from sched_harness import registered; "
          "c = registered(sys.argv[2], pod_name='secret-pod', pod_namespace='team-a'); "
          "print('ready', flush=True); sys.stdin.read()")


def _victim(sock):
    env = dict(child_env(), XPUSHARE_TEST_VICTIM=VICTIM)
    p = subprocess.Popen([sys.executable, "-c", "import os; exec(os.environ['XPUSHARE_TEST_VICTIM'])",
                          SECRET, str(sock)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    return p


def _ctl_in_process(*argv) -> str:
    """nvsharectl, run in this (already switched) process: its output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        ctl.main(list(argv))
    return out.getvalue()


def _status_and_cli(sock):
    with registered(sock) as mine:
        st = mine.ctl("status")
        cli = _ctl_in_process("--socket", str(sock), "status")
        top = _ctl_in_process("--socket", str(sock), "top", "--json")
        return st, mine.client_id, cli, top


@needs_root
def test_a_non_admin_sees_others_without_command_line_or_pod_and_itself_in_full(scheduler):
    victim = _victim(scheduler.sock)
    try:
        st, my_id, cli, top = as_user(NOBODY, NOBODY, _status_and_cli, scheduler.sock)
        with FakeClient(scheduler.sock) as root:
            full = root.ctl("status")
    finally:
        victim.kill()
        victim.wait()
    (mine,) = st["clients"]  # other users' clients are counted, not listed
    assert mine["client_id"] == my_id and st["other_users_clients"] >= 1
    assert "xpushare.cli.ctl" not in mine["command"] and mine["command"]  # its own: in full
    assert "of other users or pods, not listed" in cli and json.loads(top)["other_users_clients"] >= 1
    for text in (str(st), cli, top):
        assert "hunter2" not in text and "secret-pod" not in text
    (seen,) = [c for c in full["clients"] if c["uid"] == 0]  # an admin sees everything
    assert SECRET in seen["command"] and seen["pod_hint"]["name"] == "secret-pod"


def _status_of_one_client(sock):
    with registered(sock) as mine:
        mine.mem_update(0, managed=GiB)
        return mine.ctl("status")


@needs_root
def test_a_non_admin_s_status_is_bounded_by_its_own_clients(scheduler):
    others = [registered(scheduler.sock, devices=()) for _ in range(40)]
    try:
        for c in others:
            for dev in range(4):
                c.attach(dev, uuid(dev))
            c.mem_update(1, managed=GiB, other=GiB)
        few = as_user(NOBODY, NOBODY, _status_of_one_client, scheduler.sock)
        with FakeClient(scheduler.sock) as root:
            full = root.ctl("status")
    finally:
        for c in others:
            c.close()
    assert [c["uid"] for c in few["clients"]] == [NOBODY]
    assert few["other_users_clients"] == 40
    by_uuid = {g["uuid"]: g for g in few["gpus"]}
    assert by_uuid[uuid(0)]["other_users_clients"] == 40
    assert by_uuid[uuid(1)]["other_users_bytes"] == 40 * 2 * GiB
    assert by_uuid[uuid(0)]["other_users_bytes"] == 0
    assert len(full["clients"]) == 40 and "other_users_clients" not in full  # an admin: all listed
    assert "other_users_clients" not in full["gpus"][0]


def _many_status_requests(sock, n):
    with FakeClient(sock) as c:
        c.send_raw(STATUS * n)
        return [c.expect(MessageType.CTL_REPLY, timeout=30) for _ in range(n)]


@needs_root
def test_a_non_admin_uid_asking_for_status_in_a_loop_is_refused_past_its_budget(scheduler):
    replies = as_user(NOBODY, NOBODY, _many_status_requests, scheduler.sock, 2 * REQUESTS_BURST)
    assert all(r["ok"] for r in replies[:REQUESTS_BURST])
    refused = [r for r in replies if not r["ok"]]
    assert len(refused) >= REQUESTS_BURST - 2  # a few may have refilled meanwhile
    assert f"too many control requests from uid {NOBODY}" in refused[0]["error"]
    with FakeClient(scheduler.sock) as root:  # an admin is not limited
        assert all(r["ok"] for r in _many_status_requests(scheduler.sock, 2 * REQUESTS_BURST))
        assert root.ctl("ping")["ok"]


def test_a_lock_request_is_granted_while_a_large_status_is_being_built(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial")
    clients = [registered(s.sock, devices=()) for _ in range(150)]
    try:
        for c in clients:
            for dev in range(16):
                c.attach(dev, uuid(dev))
        waiter = clients[0]
        with FakeClient(s.sock) as asker:
            assert asker.ctl("ping")["ok"]  # accepted and read from before the status request
            asker.send_raw(STATUS)
            waiter.request(0)
            first = _first_to_arrive(asker, waiter)
            assert asker.expect(MessageType.CTL_REPLY, timeout=30)["ok"]
        assert first == "grant"
    finally:
        for c in clients:
            c.close()


@needs_root
def test_an_admins_status_requests_back_to_back_do_not_hold_another_users_reply(start_scheduler):
    """Root sends eight status requests at once (each read when the one before is answered) of a
    node whose full view takes hundreds of slices; another user asks once meanwhile. Its reply
    comes before root's second: the slicer gives an admin's request every other slice, not all of
    them (it did: the user's reply came after all eight)."""
    s = start_scheduler("--no-nvml", "--mode", "serial")
    clients = [registered(s.sock, devices=()) for _ in range(100)]
    try:
        for c in clients:
            for dev in range(16):
                c.attach(dev, uuid(dev))
        with ConnectedAs(NOBODY, NOBODY, s.sock) as (user,), FakeClient(s.sock) as root, \
                FakeClient(s.sock) as marker:
            root.send_raw(STATUS * 8)
            # The marker's reply comes after a turn of the loop that read root's first request
            # (written before it): root's reply is in the making when the user asks.
            assert marker.ctl("ping")["ok"]
            user.send_raw(STATUS)
            before = 0
            while True:
                ready, _, _ = select.select([user.sock, root.sock], [], [], 30)
                assert ready, "no reply came"
                if user.sock in ready:
                    assert user.expect(MessageType.CTL_REPLY, timeout=30)["ok"]
                    break
                assert root.expect(MessageType.CTL_REPLY, timeout=30)["ok"]
                before += 1
        assert before <= 1, f"the user's reply came after {before} of root's"
    finally:
        for c in clients:
            c.close()


def _first_to_arrive(asker, waiter) -> str:
    """Which comes first: a byte of the status reply, or the waiter's LOCK_OK."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([waiter.sock, asker.sock], [], [], 1.0)
        if waiter.sock in ready:  # both at once: the grant was written first only if it is read so
            waiter.expect(MessageType.LOCK_OK)
            return "grant" if asker.sock not in ready else "both"
        if asker.sock in ready:
            return "status"
    raise AssertionError("neither the grant nor the status reply came")


def test_status_requests_waiting_their_turn_are_not_timed_out_as_silent_peers(start_scheduler):
    # A first message must be complete within --hello-timeout; a status request that is complete
    # but waits behind others' replies is no silent peer.
    s = start_scheduler("--no-nvml", "--hello-timeout", "0.3")
    clients = [registered(s.sock, devices=()) for _ in range(100)]
    askers = []
    try:
        for c in clients:
            for dev in range(16):
                c.attach(dev, uuid(dev))
        askers = [FakeClient(s.sock) for _ in range(30)]
        for a in askers:
            a.send_raw(STATUS)
        replies = [a.expect(MessageType.CTL_REPLY, timeout=60) for a in askers]
        assert all(r["ok"] for r in replies)
        assert "sent no HELLO or control request" not in s.log()
    finally:
        for c in clients + askers:
            c.close()
