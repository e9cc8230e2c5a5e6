"""The metrics endpoint against another local user's connections (issue 22, item 3): ones that
send their request a byte at a time, or never read the answer, from one address or from several,
do not keep a scrape that sends and reads from getting its answer, and what is kept for peers that
do not read is bounded and freed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sched_harness import HeldAsUser, as_user, child_env, vm_rss
from test_metrics import free_port, get

NOBODY = 65534
MiB = 1 << 20
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _connect(port: int, source: str, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _slow_heads(port: int, sources: list[str], per_source: int):
    """Connections that have sent one byte of their request and will send no more for now."""
    kept = []
    for source in sources:
        for _ in range(per_source):
            kept.append(_connect(port, source))
            kept[-1].sendall(b"G")
    return len(kept), kept


@needs_root
@pytest.mark.parametrize("sources, each", [(["127.0.0.1"], 40), ([f"127.0.0.{i}" for i in range(2, 7)], 12)],
                         ids=["one-address", "five-addresses"])
def test_slow_requests_do_not_keep_a_scrape_out(start_scheduler, sources, each):
    port = free_port()
    start_scheduler("--no-nvml", "--metrics-port", port, "--metrics-address", "127.0.0.1")
    with HeldAsUser(NOBODY, NOBODY, _slow_heads, port, sources, each) as opened:
        assert opened == each * len(sources)  # more than the server has slots for
        # they are in the accept queue before these: each scrape comes after all of them
        answers = [get(port)[0] for _ in range(5)]
    assert answers == [200] * 5


def _non_readers(port: int, n: int):
    kept = []
    for _ in range(n):
        kept.append(_connect(port, "127.0.0.1", rcvbuf=4096))
        kept[-1].sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    return n, kept


def _answer_after(port: int, pause: float) -> tuple[int, bool]:
    """Ask, read nothing for `pause` s, then read all: (bytes read, whether the chunked answer
    has its last chunk)."""
    s = _connect(port, "127.0.0.1", rcvbuf=4096)
    s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    time.sleep(pause)
    data = b""
    try:
        while chunk := s.recv(1 << 20):
            data += chunk
    except ConnectionResetError:
        pass
    return len(data), data.endswith(b"\r\n0\r\n\r\n")


@needs_root
def test_peers_that_do_not_read_are_bounded_and_dropped():
    body_mb, write_timeout = 10, 0.3
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("big_metrics_server.py")),
                               str(body_mb), str(write_timeout)], stdout=subprocess.PIPE,
                              env=child_env(), text=True)
    try:
        port = int(server.stdout.readline())
        get(port, "/healthz")
        rss_before = vm_rss(server.pid)
        with HeldAsUser(NOBODY, NOBODY, _non_readers, port, 16) as opened:
            assert opened == 16
            status, _, body = get(port)  # after all 16 were accepted, and answered as they were
            rss_during = vm_rss(server.pid)
        assert status == 200 and len(body) == body_mb * MiB
        assert rss_during - rss_before < 32 * MiB, (rss_before, rss_during)
        # one that reads nothing for longer than the write timeout is cut off, its answer freed
        got, complete = as_user(NOBODY, NOBODY, _answer_after, port, 6 * write_timeout)
        assert not complete and got < body_mb * MiB
        assert get(port)[0] == 200
    finally:
        server.kill()
        server.wait()
