"""The bounds of src/xpushare/scheduler/node/limits.py, on the real scheduler process: what a peer that
does not read, does not finish its frames, opens too many connections or repeats a bad message can
make the daemon hold or log; and serving root at the open-file limit.

Nothing here sleeps to show that something did not happen: a later event that must come after it
(the peer's EOF, a reply on another connection, a log line) is the witness.
"""

import shutil
import select
import socket
import threading
import time

import pytest

from sched_harness import (
    FakeClient, HeldAsUser, LimitedScheduler, as_user, make_socket_dir, registered, vm_rss,
)
from testkit.waiting import poll
from xpushare.cli.client import CtlClient
from xpushare.wire.protocol import (
    Hello, LockRequest, MessageType, encode, encode_json,
)

NOBODY = 65534
MiB = 1 << 20
STATUS = encode_json(MessageType.CTL_REQUEST, {"op": "status"})


def _lines(sched, text: str) -> int:
    return sum(text in line for line in sched.log().splitlines())


# -- a peer that does not read ------------------------------------------------------------------

def _flood_status(sock_path, started: threading.Event, result: dict) -> None:
    """Ask for status again and again without reading a reply, until the scheduler hangs up."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(str(sock_path))
    batch = STATUS * 1000
    try:
        for i in range(300):  # up to 300,000 requests
            s.sendall(batch)
            started.set()
            result["sent"] = (i + 1) * 1000
    except (BrokenPipeError, ConnectionResetError):
        result["disconnected"] = True
    finally:
        started.set()
        s.close()


def test_a_peer_that_does_not_read_is_disconnected_and_the_others_are_still_served(scheduler):
    a, b = registered(scheduler.sock), registered(scheduler.sock)
    a.request()
    a.expect(MessageType.LOCK_OK)
    b.request()
    assert b.nothing_sent()
    rss_before = vm_rss(scheduler.proc.pid)

    started, result = threading.Event(), {}
    flood = threading.Thread(target=_flood_status, args=(scheduler.sock, started, result))
    flood.start()
    started.wait(20)
    a.release()  # the lock passes to B while the flood goes on
    b.expect(MessageType.LOCK_OK)
    flood.join(120)
    assert result.get("disconnected"), f"still connected after {result.get('sent')} requests"
    rss_after = vm_rss(scheduler.proc.pid)
    print(f"VmRSS before {rss_before / MiB:.1f} MiB, after {rss_after / MiB:.1f} MiB, "
          f"{result.get('sent')} requests sent before the disconnect")
    assert rss_after - rss_before < 48 * MiB
    assert _lines(scheduler, "does not read what it is sent") == 1
    assert b.ctl("status")["ok"]  # the others keep their connections
    a.close()
    b.close()


# -- deadlines ----------------------------------------------------------------------------------

def _closed_with_error(c: FakeClient) -> str:
    """The ERROR text the scheduler sent before closing the connection."""
    frame = c.recv(timeout=15)
    assert frame is not None and frame.type == MessageType.ERROR, frame
    assert c.recv(timeout=15) is None
    return frame.decode()


def test_silent_and_half_frame_connections_are_closed_at_their_deadline_idle_clients_are_not(
        start_scheduler):
    s = start_scheduler("--no-nvml", "--hello-timeout", "1", "--frame-timeout", "1")
    idle = registered(s.sock)  # has completed HELLO: may stay silent for as long as it likes
    t0 = time.monotonic()
    silent = FakeClient(s.sock)
    half_hello = FakeClient(s.sock)
    half_hello.send_raw(encode(Hello(0, 0, "", ""))[:20])
    half_frame = registered(s.sock)
    half_frame.send_raw(encode(LockRequest(0, 0))[:7])

    assert "sent no HELLO or control request within 1s" in _closed_with_error(silent)
    assert "sent no HELLO or control request within 1s" in _closed_with_error(half_hello)
    assert "did not complete a frame within 1s" in _closed_with_error(half_frame)
    assert time.monotonic() - t0 >= 1.0
    # The idle client connected before the others, so any deadline it had has passed too.
    assert idle.ctl("status")["ok"]
    assert _lines(s, "sent no HELLO or control request within 1s; closing") == 2
    assert _lines(s, "did not complete a frame within 1s; closing") == 1
    assert "closed inside a frame" not in s.log()  # one line per connection, not two
    idle.close()


# -- per-uid connection cap ---------------------------------------------------------------------

def _say_hello(c: FakeClient, timeout: float = 5.0):
    """Send HELLO; the first frame back. A refused connection may be closed before HELLO is
    written (EPIPE), but the ERROR it was sent is still there to read."""
    try:
        c.send_raw(encode(Hello(0, 0, "", "")))
    except (BrokenPipeError, ConnectionResetError):
        pass
    return c.recv(timeout)


def _connect_as_user(sock_path, n: int) -> list:
    """Open n connections and say HELLO on each; the first frame each got back, as (type, text)."""
    got, kept = [], []
    for _ in range(n):
        c = FakeClient(sock_path)
        kept.append(c)
        frame = _say_hello(c)
        got.append((frame.type.name, str(frame.decode()) if frame.type == MessageType.ERROR else ""))
    return got


def test_the_connection_past_the_per_uid_cap_is_refused_with_an_error(start_scheduler):
    s = start_scheduler("--no-nvml", "--max-connections-per-uid", "3")
    got = as_user(NOBODY, NOBODY, _connect_as_user, s.sock, 5)
    assert [kind for kind, _ in got] == ["WELCOME"] * 3 + ["ERROR"] * 2
    assert "too many connections from uid 65534: 3 open, at most 3" in got[3][1]
    roots = [registered(s.sock, devices=()) for _ in range(5)]  # root is exempt
    assert s.ctl("ping")["ok"]
    assert _lines(s, "refusing a connection of") == 1  # one line per uid and interval
    for c in roots:
        c.close()


# -- repeated warnings --------------------------------------------------------------------------

def test_ten_thousand_requests_for_an_unattached_device_log_a_bounded_number_of_lines(scheduler):
    c = registered(scheduler.sock)
    c.send_raw(encode(LockRequest(5, 0)) * 10_000)
    c.send_raw(STATUS)
    errors = 0
    while (frame := c.recv()).type == MessageType.ERROR:
        errors += 1
    assert frame.type == MessageType.CTL_REPLY and errors == 10_000
    assert 1 <= _lines(scheduler, "device 5 was never attached") <= 2
    c.close()


# -- the open-file limit ------------------------------------------------------------------------

def _fill_as_user(sock_path, n: int):
    """Open up to n connections with HELLO, and keep them; what came back, grouped."""
    kept, welcomed, refused = [], 0, []
    for _ in range(n):
        try:
            c = FakeClient(sock_path, timeout=2)
            kept.append(c)
            frame = _say_hello(c, timeout=2)
        except OSError as e:  # (a socket timeout too) nobody accepts any more
            return (welcomed, refused, repr(e)), kept
        if frame.type == MessageType.WELCOME:
            welcomed += 1
        else:
            refused.append(str(frame.decode()))
    return (welcomed, refused, None), kept


def _closed_by_peer(c: socket.socket) -> bool:
    readable, _, _ = select.select([c], [], [], 0)
    if not readable:
        return False
    try:
        return c.recv(65536, socket.MSG_PEEK) == b""
    except OSError:
        return True


@pytest.fixture(params=["asyncio", "uvloop"])
def limited(request):
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    d = make_socket_dir()
    s = LimitedScheduler(d / "s.sock", 96, ["--no-nvml", "--event-loop", request.param]).start()
    s.event_loop = request.param
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_at_the_open_file_limit_root_and_ping_are_served_and_the_log_stays_quiet(limited):
    s = limited
    assert "open-file limit 96 (hard limit 96)" in s.log()
    with HeldAsUser(NOBODY, NOBODY, _fill_as_user, s.sock, 150) as (welcomed, refused, err):
        assert err is None, f"connections hung after {welcomed} were welcomed: {err}"
        assert 0 < welcomed < 96 and len(refused) == 150 - welcomed
        assert "at its open-file limit" in refused[0]
        with CtlClient(s.sock) as ctl:
            assert ctl.request("ping")["ok"]
        with registered(s.sock) as root_client:
            root_client.request()
            root_client.expect(MessageType.LOCK_OK)
    assert _lines(s, "refusing a connection of") == 1

    # Root is not refused: its connections can use up every descriptor. accept() then fails,
    # with one line in the log, and the daemon serves again once they are gone.
    roots = []
    try:
        while len(roots) < 200:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(0.5)
            roots.append(c)
            c.connect(str(s.sock))
    except OSError:
        pass
    if s.event_loop == "asyncio":
        s.wait_log("cannot accept connections: Too many open files")
    else:  # libuv accepts what it cannot keep and closes it at once: no log line, an EOF
        poll(lambda: any(_closed_by_peer(c) for c in roots), 15,
             what="a connection past the limit to be closed")
    for c in roots:
        c.close()
    poll(lambda: s._answers(), 15, what="the scheduler to answer again")
    assert _lines(s, "cannot accept connections") <= 2
    assert "Traceback" not in s.log()
