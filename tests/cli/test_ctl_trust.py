"""nvsharectl (CtlClient) uses a scheduler socket only under the library's trust rule
(paths.socket_trusted): a socket in a directory writable by others without the sticky bit could be
anybody's scheduler, which would show made-up state and see every request."""

import socket
import subprocess
import sys

import pytest

from sched_harness import child_env
from xpushare.cli.client import CtlClient, UntrustedSocket


def _listening(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(4)
    s.setblocking(False)
    return s


def test_a_socket_in_a_world_writable_directory_is_not_used(sockdir):
    d = sockdir / "open"
    d.mkdir()
    d.chmod(0o777)
    listener = _listening(d / "s.sock")
    try:
        with pytest.raises(UntrustedSocket, match="writable by other users"):
            CtlClient(d / "s.sock")
        with pytest.raises(BlockingIOError):  # it never even connected
            listener.accept()
    finally:
        listener.close()


def test_a_trusted_socket_is_used(scheduler):
    with CtlClient(scheduler.sock) as c:
        assert c.request("ping")["ok"]


def test_nvsharectl_says_why_it_did_not_use_a_socket(sockdir):
    d = sockdir / "open"
    d.mkdir()
    d.chmod(0o777)
    listener = _listening(d / "s.sock")
    try:
        r = subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(d / "s.sock"),
                            "status"], env=child_env(), capture_output=True, text=True, timeout=60)
    finally:
        listener.close()
    assert r.returncode == 1
    assert f"not using the scheduler socket {d / 's.sock'}: its directory {d} is writable" in r.stderr
