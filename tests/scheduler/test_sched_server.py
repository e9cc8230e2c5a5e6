"""The real scheduler process, driven by fake clients speaking the wire protocol."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.waiting import poll
from sched_harness import (
    GiB, FakeClient, SchedulerProcess, as_user, child_env, registered, uuid,
)
from xpushare import __version__
from xpushare.cli.client import socket_answers
from xpushare.wire.protocol import (
    HEADER, MAGIC, MAX_PAYLOAD, VERSION, DropReason, LockRequest, MessageType, encode, encode_frame,
)

CLIENT_PROC = Path(__file__).resolve().parent / "client_proc.py"


def spawn_client(sock, gpu, *args):
    return subprocess.Popen([sys.executable, str(CLIENT_PROC), str(sock), gpu, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())


def wait_line(proc, expected):
    line = proc.stdout.readline().strip()
    assert line == expected, f"client printed {line!r}, expected {expected!r}"


# -- registration ------------------------------------------------------------------------------

def test_hello_gets_a_welcome_with_a_distinct_client_id(scheduler):
    with FakeClient(scheduler.sock) as a, FakeClient(scheduler.sock) as b:
        wa, wb = a.hello(), b.hello()
        assert wa.protocol_version == wb.protocol_version == VERSION
        assert wa.client_id != wb.client_id and wa.client_id > 0


def test_attach_of_an_unknown_gpu_makes_it_up_and_each_client_keeps_its_own_capacity(scheduler):
    assert scheduler.status()["gpus"] == []
    with registered(scheduler.sock, devices=()) as a, registered(scheduler.sock, devices=()) as b:
        att = a.attach(3, uuid(7), name="Mock GPU 7", physical=16 * GiB, capacity=12 * GiB)
        assert (att.device, att.capacity) == (3, 12 * GiB)
        # A client's report applies to that client only: the GPU's capacity stays unknown.
        assert b.attach(0, uuid(7), capacity=4 * GiB).capacity == 4 * GiB
        (gpu,) = scheduler.status()["gpus"]
        assert (gpu["uuid"], gpu["name"], gpu["index"], gpu["capacity"], gpu["capacity_source"],
                gpu["memory_total"]) == (uuid(7), "Mock GPU 7", None, 0, "unknown", 0)
    assert scheduler.status()["gpus"] == []  # forgotten with its last client


def test_capacity_from_nvml_beats_the_client_report(start_scheduler):
    s = start_scheduler(nvml=[{"uuid": uuid(0), "name": "Fake H100", "memory": 80 * GiB},
                              {"uuid": uuid(1), "name": "Fake H100", "memory": 40 * GiB}])
    gpus = s.status()["gpus"]  # known before any client
    assert [(g["index"], g["uuid"], g["name"], g["memory_total"]) for g in gpus] == \
        [(0, uuid(0), "Fake H100", 80 * GiB), (1, uuid(1), "Fake H100", 40 * GiB)]
    with registered(s.sock, devices=()) as c:
        assert c.attach(0, uuid(1), capacity=8 * GiB).capacity == 40 * GiB


def test_capacity_from_gpu_memory_flag_beats_nvml_and_client(start_scheduler):
    s = start_scheduler("--gpu-memory", "16GiB", "--gpu-memory", f"{uuid(1)}=4GiB",
                        nvml=[{"uuid": uuid(0), "name": "Fake", "memory": 80 * GiB},
                              {"uuid": uuid(1), "name": "Fake", "memory": 80 * GiB}])
    with registered(s.sock, devices=()) as c:
        assert c.attach(0, uuid(0), capacity=2 * GiB).capacity == 16 * GiB
        assert c.attach(1, uuid(1), capacity=2 * GiB).capacity == 4 * GiB
        # A GPU only clients know also gets the all-GPU setting.
        assert c.attach(2, uuid(9), capacity=2 * GiB).capacity == 16 * GiB


def test_failing_nvml_is_tolerated(start_scheduler):
    s = start_scheduler(nvml=[], env={"FAKE_NVML_FAIL": "1"})
    assert s.status()["gpus"] == []
    assert "NVML unavailable" in s.log()
    with registered(s.sock, devices=()) as c:
        assert c.attach(0, uuid(0), capacity=GiB).capacity == GiB


def test_set_gpu_memory_changes_later_attaches_and_zero_clears(scheduler):
    with registered(scheduler.sock, devices=()) as c:
        c.attach(0, uuid(0), capacity=8 * GiB)
        assert c.ctl("set_gpu_memory", gpu=uuid(0), bytes=2 * GiB) == {"ok": True}
        assert c.attach(0, uuid(0)).capacity == 2 * GiB
        assert c.ctl("set_gpu_memory", gpu=uuid(0), bytes=0) == {"ok": True}
        assert c.attach(0, uuid(0), capacity=8 * GiB).capacity == 8 * GiB  # its own again
        assert not c.ctl("set_gpu_memory", bytes=GiB)["ok"]  # gpu is required


# -- the lock -----------------------------------------------------------------------------------

def test_lock_handoff_fcfs(scheduler):
    a, b, c = (registered(scheduler.sock) for _ in range(3))
    a.request()
    grant = a.expect(MessageType.LOCK_OK)
    assert (grant.device, grant.quantum_ms) == (0, 30_000)
    b.request()
    c.request()
    assert b.nothing_sent() and c.nothing_sent()
    a.release()
    assert b.expect(MessageType.LOCK_OK).device == 0
    assert c.nothing_sent()
    b.release()
    c.expect(MessageType.LOCK_OK)
    log = scheduler.wait_log("release pid=")
    assert f"grant pid={os.getpid()} gpu={uuid(0)}" in log
    for x in (a, b, c):
        x.close()


def test_quantum_expiry_sends_drop_lock_only_when_someone_waits(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "0.5")
    a, b = registered(s.sock), registered(s.sock)
    a.request()
    t0 = time.monotonic()
    assert a.expect(MessageType.LOCK_OK).quantum_ms == 500
    s.wait_held_for(1.2)
    assert a.nothing_sent()  # alone: keeps the GPU past its quantum
    b.request()
    drop = a.expect(MessageType.DROP_LOCK, timeout=10)
    assert (drop.device, drop.reason) == (0, DropReason.QUANTUM)
    assert time.monotonic() - t0 >= 1.2
    assert b.nothing_sent()  # not granted while A drains
    t1 = time.monotonic()
    a.release()
    assert b.expect(MessageType.LOCK_OK).quantum_ms == 500
    a.request()
    assert b.expect(MessageType.DROP_LOCK, timeout=10).reason == DropReason.QUANTUM
    assert time.monotonic() - t1 >= 0.45  # B had its full quantum
    assert s.wait_log("drop pid=")
    assert "reason=quantum" in s.log()


def test_a_holder_that_never_answers_drop_is_evicted_after_two_quanta(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "0.5")
    a, b = registered(s.sock), registered(s.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    a.expect(MessageType.DROP_LOCK, timeout=5)
    dropped = time.monotonic()
    assert b.nothing_sent()  # nobody is granted while A may still be draining
    # A ignores DROP_LOCK: it is told why, then its connection is closed and B gets the GPU.
    assert "evicted" in a.expect(MessageType.ERROR, timeout=10)
    assert time.monotonic() - dropped >= 0.8  # two quanta of 0.5 s, less the delivery of the drop
    assert a.closed_by_peer()
    assert b.expect(MessageType.LOCK_OK, timeout=5).quantum_ms == 500
    log = s.wait_log("evict pid=")
    assert "has not released" in log  # reported overdue after one quantum
    assert f"evict pid={os.getpid()} gpu={uuid(0)} after " in log
    # The evicted client reconnects like any other and queues behind B.
    with registered(s.sock) as again:
        again.request()
        assert again.nothing_sent()
        b.release()
        again.expect(MessageType.LOCK_OK)
    b.close()


def test_a_stopped_holder_process_is_evicted(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "0.5")
    p = spawn_client(s.sock, uuid(0), "--lock")
    try:
        wait_line(p, "registered")
        wait_line(p, "granted")
        os.kill(p.pid, signal.SIGSTOP)  # like Ctrl-Z: it can never answer DROP_LOCK
        with registered(s.sock) as b:
            b.request()
            b.expect(MessageType.LOCK_OK, timeout=10)
        assert f"evict pid={p.pid} gpu={uuid(0)}" in s.wait_log(f"evict pid={p.pid}")
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()


def test_a_request_after_an_unused_expiry_drops_the_holder_at_once(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "3")
    a, b = registered(s.sock), registered(s.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    s.wait_held_for(3.5)
    assert a.nothing_sent()  # its quantum runs out while nobody waits: it keeps the GPU
    b.request()
    # Not another quantum (2.5 s more) of waiting: the drop follows the request.
    assert a.expect(MessageType.DROP_LOCK, timeout=1.5).reason == DropReason.QUANTUM
    a.release()
    assert b.expect(MessageType.LOCK_OK).quantum_ms == 3000


def test_disconnect_of_the_holder_frees_the_lock(scheduler):
    a, b = registered(scheduler.sock), registered(scheduler.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    assert b.nothing_sent()
    a.close()
    b.expect(MessageType.LOCK_OK, timeout=3)
    assert "disconnect pid=" in scheduler.wait_log("(held gpu")


def test_killed_holder_process_frees_the_lock(scheduler):
    p = spawn_client(scheduler.sock, uuid(0), "--lock")
    wait_line(p, "registered")
    wait_line(p, "granted")
    with registered(scheduler.sock) as b:
        b.request()
        assert b.nothing_sent()
        p.kill()
        p.wait()
        b.expect(MessageType.LOCK_OK, timeout=3)
    assert f"disconnect pid={p.pid}" in scheduler.wait_log(f"disconnect pid={p.pid}")


def test_disconnect_of_a_waiter_removes_it_from_the_queue(scheduler):
    a, b, c = (registered(scheduler.sock) for _ in range(3))
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    c.request()
    poll(lambda: len(scheduler.status()["gpus"][0]["queue"]) == 2)
    b.close()
    poll(lambda: len(scheduler.status()["gpus"][0]["queue"]) == 1)
    a.release()
    c.expect(MessageType.LOCK_OK)


def test_one_lock_per_gpu_and_ordinals_are_per_client(scheduler):
    # a sees GPU 5 as its device 1; b sees it as its device 0.
    a = registered(scheduler.sock, devices=())
    a.attach(0, uuid(4))
    a.attach(1, uuid(5))
    b = registered(scheduler.sock, devices=())
    b.attach(0, uuid(5))
    a.request(0)
    a.request(1)
    got = {a.expect(MessageType.LOCK_OK).device, a.expect(MessageType.LOCK_OK).device}
    assert got == {0, 1}
    b.request(0)
    assert b.nothing_sent()
    # One process on several GPUs is a job (policy/gang.py): its GPUs go together, when it has
    # released them all.
    a.release(1)
    assert b.nothing_sent() and a.nothing_sent()
    a.release(0)
    assert b.expect(MessageType.LOCK_OK).device == 0


def test_ignored_requests_and_releases(scheduler):
    a, b = registered(scheduler.sock), registered(scheduler.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    a.request()            # already holds
    b.release()            # does not hold
    assert b.nothing_sent() and a.nothing_sent()
    b.request()
    b.request()            # already waiting
    a.release()
    b.expect(MessageType.LOCK_OK)
    b.release()
    assert b.nothing_sent()   # granted once only


def test_request_for_an_unattached_device_is_answered_with_error_but_keeps_the_connection(scheduler):
    with registered(scheduler.sock) as a:
        a.request(5)
        assert "not attached" in a.expect(MessageType.ERROR)
        a.request(0)
        a.expect(MessageType.LOCK_OK)


def test_mode_off_grants_everyone_and_back_to_serial_drops_all_but_first(scheduler):
    a, b, c = (registered(scheduler.sock) for _ in range(3))
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    c.request()
    with FakeClient(scheduler.sock) as ctl:
        assert ctl.ctl("set_mode", mode="off") == {"ok": True}
        assert b.expect(MessageType.LOCK_OK).quantum_ms == 0
        assert c.expect(MessageType.LOCK_OK).quantum_ms == 0
        assert ctl.ctl("set_mode", mode="serial", gpu=uuid(0)) == {"ok": True}
    assert b.expect(MessageType.DROP_LOCK).reason == DropReason.ADMIN
    assert c.expect(MessageType.DROP_LOCK).reason == DropReason.ADMIN
    assert a.nothing_sent()
    (gpu,) = scheduler.status()["gpus"]
    assert gpu["mode"] == "serial"
    assert [h["pid"] for h in gpu["holders"]] == [os.getpid()] * 3
    assert [h["dropping"] for h in gpu["holders"]] == [False, True, True]


def test_set_tq_rearms_the_holder(scheduler):
    a, b = registered(scheduler.sock), registered(scheduler.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    assert b.nothing_sent()
    scheduler.wait_held_for(0.5)  # a gap between the grant and the change, so that the two differ
    assert a.nothing_sent()  # TQ is 30 s
    t0 = time.monotonic()
    with FakeClient(scheduler.sock) as ctl:
        assert ctl.ctl("set_tq", seconds=1) == {"ok": True}
    assert a.expect(MessageType.DROP_LOCK, timeout=10).reason == DropReason.QUANTUM
    assert time.monotonic() - t0 >= 0.95  # re-armed from the change, not from the grant
    a.release()
    assert b.expect(MessageType.LOCK_OK).quantum_ms == 1000


# -- malformed frames ---------------------------------------------------------------------------

def _hdr(magic=MAGIC, version=VERSION, mtype=MessageType.REQ_LOCK, length=8):
    return HEADER.pack(magic, version, int(mtype), length)


MALFORMED = {
    "bad_magic": _hdr(magic=0xDEADBEEF) + bytes(8),
    "bad_version": _hdr(version=1) + bytes(8),
    "bad_length": _hdr(length=7) + bytes(7),
    "unknown_type": HEADER.pack(MAGIC, VERSION, 99, 0),
    "oversized": HEADER.pack(MAGIC, VERSION, int(MessageType.CTL_REQUEST), MAX_PAYLOAD + 1),
    "wrong_direction": encode_frame(MessageType.LOCK_OK, bytes(16)),
    "second_hello": encode_frame(MessageType.HELLO, bytes(520)),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_frame_closes_only_that_connection(scheduler, kind):
    good = registered(scheduler.sock)
    good.request()
    good.expect(MessageType.LOCK_OK)
    bad = registered(scheduler.sock)
    bad.request()  # queued behind good
    bad.send_raw(MALFORMED[kind])
    frame = bad.recv()
    assert frame is not None and frame.type == MessageType.ERROR
    assert "protocol error" in frame.decode()
    assert bad.closed_by_peer()
    assert "protocol error" in scheduler.wait_log("protocol error")
    # The daemon and the other connection carry on; the bad client lost its place.
    good.release()
    assert good.nothing_sent()
    good.request()
    good.expect(MessageType.LOCK_OK)
    assert scheduler.alive()
    assert len(scheduler.status()["clients"]) == 1


def test_messages_before_hello_are_refused(scheduler):
    with FakeClient(scheduler.sock) as c:
        c.send_raw(encode(LockRequest(0, 0)))
        assert "HELLO must come first" in c.expect(MessageType.ERROR)
        assert c.closed_by_peer()


def test_truncated_frame_then_close_is_survived(scheduler):
    with registered(scheduler.sock) as c:
        c.send_raw(encode_frame(MessageType.MEM_UPDATE, bytes(24))[:20])
    scheduler.wait_log("inside a frame")
    assert scheduler.alive() and scheduler.status()["clients"] == []


def test_garbage_stream_from_many_connections_is_survived(scheduler):
    for i in range(20):
        with FakeClient(scheduler.sock) as c:
            c.send_raw(os.urandom(64 + i))
    assert scheduler.alive()
    with registered(scheduler.sock) as c:
        c.request()
        c.expect(MessageType.LOCK_OK)


def test_invalid_json_control_request_is_a_protocol_error(scheduler):
    with FakeClient(scheduler.sock) as c:
        c.send(MessageType.CTL_REQUEST, b"[1, 2]")
        assert "not an object" in c.expect(MessageType.ERROR)
        assert c.closed_by_peer()


# -- control operations -------------------------------------------------------------------------

def test_status_reports_gpus_holders_queue_and_clients(scheduler):
    holder = spawn_client(scheduler.sock, uuid(0), "--mem", str(3 * GiB), str(GiB), "--lock")
    wait_line(holder, "registered")
    wait_line(holder, "granted")
    granted_by = time.monotonic()  # the grant came before this
    with registered(scheduler.sock) as waiter, registered(scheduler.sock, devices=()) as idle:
        waiter.request()
        asked = []

        def queued():
            asked.append(time.monotonic())  # the status answer is computed after this
            st = scheduler.status()
            # wait for the queued request, and for a holding time the check below can bound
            return st["gpus"][0]["queue"] and asked[-1] - granted_by >= 0.2 and st
        st = poll(queued)
        assert st["scheduler"]["pid"] == scheduler.proc.pid
        (gpu,) = st["gpus"]
        assert gpu["uuid"] == uuid(0) and gpu["mode"] == "serial" and gpu["tq"] == 30
        assert (gpu["capacity"], gpu["capacity_source"]) == (0, "unknown")  # no NVML, no setting
        (h,) = gpu["holders"]
        # held at least from the grant (before granted_by) to the status request (after asked[-1])
        assert h["pid"] == holder.pid and 0.2 <= h["held_for"] < 30
        assert asked[-1] - granted_by <= h["held_for"] + 0.001  # (held_for is rounded to 1 ms)
        assert gpu["queue"] == [os.getpid()]
        assert (gpu["resident_bytes"], gpu["swapped_bytes"], gpu["reclaiming"],
                gpu["reclaims"], gpu["last_switch"]) == (4 * GiB, 0, [], 0, None)
        clients = {c["client_id"]: c for c in st["clients"]}
        assert len(clients) == 3
        hc = next(c for c in clients.values() if c["pid"] == holder.pid)
        assert hc["state"] == "holding" and hc["priority"] == 3
        assert "client_proc.py" in hc["command"]
        assert hc["uid"] == os.getuid()
        assert hc["gpus"] == [{"device": 0, "uuid": uuid(0), "index": None, "state": "holding",
                               "managed_bytes": 3 * GiB, "other_bytes": GiB,
                               "gpu_busy_seconds": 0.0, "gpu_busy_ratio": None,
                               "queueing_delay": hc["gpus"][0]["queueing_delay"],
                               "over_memory_limit": False,
                               "pinning_ahead": False, "keeps_idle_lock": False,
                               # a holder's memory is on the GPU; it never swapped
                               "resident_bytes": 4 * GiB, "swapped_bytes": 0,
                               "reclaiming": False, "swap_refused": False,
                               "swap_out_seconds": None, "swap_in_seconds": None}]
        assert hc["gpus"][0]["queueing_delay"]["count"] == 1  # granted once, at once
        assert hc["quota"] == {"compute_limit": None, "compute_share": None, "memory_limit": None,
                               "latency_sensitive": False,
                               "sources": dict.fromkeys(("compute_limit", "compute_share",
                                                         "memory_limit", "latency_sensitive"),
                                                        "environment"),
                               "applied_by_client": False}
        assert hc["pod_hint"] == {"namespace": "ml", "name": "trainer-0"}
        assert hc["pod"] is None  # hints are shown as hints; identity comes from the cgroup only
        assert clients[waiter.client_id]["state"] == "waiting"
        assert clients[idle.client_id]["state"] == "idle"
        assert clients[idle.client_id]["gpus"] == []
    holder.stdin.close()
    holder.wait(5)


def test_largest_quantum_is_granted_and_larger_ones_are_refused(start_scheduler):
    s = start_scheduler("--no-nvml", "--mode", "serial", "--tq", "4294967")
    a, b = registered(s.sock), registered(s.sock)
    a.request()
    assert a.expect(MessageType.LOCK_OK).quantum_ms == 4_294_967_000
    with FakeClient(s.sock) as ctl:
        for too_big in (4_294_968, 5_000_000, 10**30):
            reply = ctl.ctl("set_tq", seconds=too_big)
            assert not reply["ok"] and "at most 4294967" in reply["error"], reply
        assert ctl.ctl("status")["scheduler"]["tq"] == 4294967
    # Grants keep working.
    b.request()
    a.release()
    assert b.expect(MessageType.LOCK_OK).quantum_ms == 4_294_967_000
    assert "internal" not in s.log()
    a.close()
    b.close()


def test_ping_answers_with_the_version(scheduler):
    with FakeClient(scheduler.sock) as c:
        assert c.ctl("ping") == {"ok": True, "version": __version__}
        assert c.ctl("ping") == {"ok": True, "version": __version__}  # several on one connection


def test_set_tq_and_set_mode_validate_and_select(start_scheduler):
    s = start_scheduler("--tq", "30", nvml=[{"uuid": uuid(0), "name": "A", "memory": GiB},
                              {"uuid": uuid(1), "name": "B", "memory": GiB}])
    with FakeClient(s.sock) as c:
        for bad in (0, -3, 1.5, "7", True, None):
            r = c.ctl("set_tq", seconds=bad)
            assert not r["ok"] and "positive integer" in r["error"]
        assert "auto, serial or off" in c.ctl("set_mode", mode="fast")["error"]
        assert "no GPU matches" in c.ctl("set_tq", seconds=5, gpu=7)["error"]
        assert c.ctl("set_tq", seconds=5, gpu=1) == {"ok": True}
        assert c.ctl("set_mode", mode="off", gpu=uuid(0)[:-1].upper()) != {"ok": True}  # ambiguous
        assert c.ctl("set_mode", mode="off", gpu=uuid(0)) == {"ok": True}
        gpus = c.ctl("status")["gpus"]
        assert [(g["tq"], g["mode"]) for g in gpus] == [(30, "off"), (5, "auto")]
        assert c.ctl("set_tq", seconds=9) == {"ok": True}
        assert [g["tq"] for g in c.ctl("status")["gpus"]] == [9, 9]
        # New GPUs inherit the daemon-wide setting.
        with registered(s.sock, devices=()) as client:
            client.attach(0, uuid(2))
            assert c.ctl("status")["gpus"][2]["tq"] == 9
        assert c.ctl("frobnicate") == {"ok": False, "error": "unknown op 'frobnicate'"}


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
NOBODY = 65534


def _ctl(sock, op, fields):
    with FakeClient(sock) as c:
        return c.ctl(op, **fields)


def _ctl_as(sock, uid, gid, op, **fields):
    return as_user(uid, gid, _ctl, sock, op, fields)


@needs_root
def test_admin_ops_are_refused_to_another_uid(scheduler):
    with registered(scheduler.sock):  # keeps the client-made GPU known
        for op, fields in (("set_tq", {"seconds": 1}), ("set_mode", {"mode": "off"}),
                           ("set_gpu_memory", {"bytes": 1, "gpu": uuid(0)})):
            reply = _ctl_as(scheduler.sock, NOBODY, NOBODY, op, **fields)
            assert not reply["ok"] and "permission denied" in reply["error"], reply
        assert _ctl_as(scheduler.sock, NOBODY, NOBODY, "status")["ok"]  # reading is allowed
        assert _ctl_as(scheduler.sock, NOBODY, NOBODY, "ping")["ok"]
        (gpu,) = scheduler.status()["gpus"]
        assert (gpu["tq"], gpu["mode"], gpu["capacity"]) == (30, "serial", 0)
    assert "permission denied" in scheduler.log()


@needs_root
def test_admin_group_members_may_change_settings(start_scheduler):
    s = start_scheduler("--no-nvml", "--admin-group", "4242")
    assert _ctl_as(s.sock, NOBODY, 4242, "set_tq", seconds=12) == {"ok": True}
    assert not _ctl_as(s.sock, NOBODY, NOBODY, "set_tq", seconds=13)["ok"]
    assert s.status()["scheduler"]["tq"] == 12


def _take_lock(sock):
    with registered(sock) as c:
        c.request()
        grant = c.expect(MessageType.LOCK_OK)
        (me,) = c.ctl("status")["clients"]
        return grant.device, me["uid"], me["state"]


@needs_root
def test_any_user_may_be_scheduled(scheduler):
    assert as_user(NOBODY, NOBODY, _take_lock, scheduler.sock) == (0, NOBODY, "holding")


# -- the socket file ---------------------------------------------------------------------------

def test_socket_is_world_writable_and_removed_on_sigterm(scheduler):
    assert os.stat(scheduler.sock).st_mode & 0o777 == 0o666
    assert scheduler.stop() == 0
    assert not scheduler.sock.exists()
    assert "shutting down" in scheduler.log()


def test_stale_socket_is_replaced_and_a_live_one_is_not(sockdir, start_scheduler):
    stale = sockdir / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # a socket file nobody listens on
    first = start_scheduler("--no-nvml")
    assert "removed stale socket" in first.log()
    second = SchedulerProcess(stale, ["--no-nvml"]).start(wait=False)
    assert second.proc.wait(10) == 1
    assert "already listening" in second.log()
    assert first.alive() and socket_answers(stale)


def test_refuses_to_remove_a_regular_file(sockdir):
    path = sockdir / "s.sock"
    path.write_text("not a socket")
    p = SchedulerProcess(path, ["--no-nvml"]).start(wait=False)
    assert p.proc.wait(10) == 1
    assert "not a socket" in p.log()
    assert path.read_text() == "not a socket"


def test_creates_the_socket_directory(sockdir):
    p = SchedulerProcess(sockdir / "a" / "b" / "s.sock", ["--no-nvml"],
                         logfile=sockdir / "s.log").start()
    try:
        assert (sockdir / "a" / "b").stat().st_mode & 0o777 == 0o755
    finally:
        p.stop()


def test_bad_command_line_values_exit_2(sockdir):
    for args in (["--tq", "0"], ["--tq", "x"], ["--tq", "1e7"], ["--tq", "inf"], ["--tq", "nan"],
                 ["--tq", "0.0001"], ["--mode", "fast"], ["--tq", "soon"], ["--reserve", "lots"],
                 ["--gpu-memory", "lots"], ["--gpu-memory", str(2**64 - 1)],
                 ["--gpu-memory", "0=4096T"]):   # past 4 PiB less 1 MiB (wire.scheduling)
        r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--socket",
                            str(sockdir / "s.sock"), *args], env=child_env(), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "usage:" in r.stderr, args


def test_status_with_many_clients_fits_in_one_frame(scheduler):
    clients = [registered(scheduler.sock) for _ in range(120)]
    try:
        st = scheduler.status()
        assert len(st["clients"]) == 120
        assert all(c["command"] for c in st["clients"])
    finally:
        for c in clients:
            c.close()
