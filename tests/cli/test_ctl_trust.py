"""nvsharectl (CtlClient) uses a scheduler socket only under the library's trust rule
(paths.socket_trusted): a socket in a directory writable by others without the sticky bit could be
anybody's scheduler, which would show made-up state and see every request."""

import socket

import pytest

from xpushare.client import CtlClient, UntrustedSocket


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
