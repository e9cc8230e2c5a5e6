"""nvsharectl top's keys: q leaves, the terminal is put back as it was, Ctrl-C leaves too."""

import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time

import pytest

from live_clients import TWO_GPUS, start_clients
from sched_harness import child_env
from xpushare.cli.ctl_keys import KeyReader


class Fd:
    def __init__(self, fd):
        self.fd = fd

    def fileno(self):
        return self.fd


@pytest.fixture
def tty_pair():
    master, slave = pty.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


def test_q_quits_and_the_terminal_is_restored(tty_pair):
    master, slave = tty_pair
    before = termios.tcgetattr(slave)
    with KeyReader(Fd(slave)) as keys:
        during = termios.tcgetattr(slave)
        assert not during[3] & termios.ICANON and not during[3] & termios.ECHO  # key by key, unseen
        assert during[3] & termios.ISIG  # Ctrl-C still interrupts
        assert keys.wait_for_quit(0.05) is False
        os.write(master, b"x")
        assert keys.read(1.0) == "x"  # without Enter
        os.write(master, b"aq")
        started = time.monotonic()
        assert keys.wait_for_quit(5.0) is True
        assert time.monotonic() - started < 1.0
    assert termios.tcgetattr(slave) == before


def test_the_terminal_is_restored_when_the_view_fails(tty_pair):
    _, slave = tty_pair
    before = termios.tcgetattr(slave)
    with pytest.raises(KeyboardInterrupt):
        with KeyReader(Fd(slave)):
            raise KeyboardInterrupt
    assert termios.tcgetattr(slave) == before


def test_a_pipe_at_its_end_only_waits():
    r, w = os.pipe()
    os.write(w, b"zz")
    os.close(w)
    try:
        with KeyReader(Fd(r)) as keys:
            started = time.monotonic()
            assert keys.wait_for_quit(0.3) is False
            assert time.monotonic() - started >= 0.29
    finally:
        os.close(r)


def test_a_stream_without_a_descriptor_only_waits():
    import io
    with KeyReader(io.StringIO()) as keys:
        assert keys.wait_for_quit(0.05) is False


def _read_until(fd, text: bytes, timeout: float) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the other side closed
                break
    return seen


def _interruptible() -> None:
    """Ctrl-C as a terminal delivers it: a test run started in the background (`cmd &` in a
    script) ignores SIGINT, and a program started from it would inherit that and never see one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _drain_until_exit(fd, proc, timeout: float) -> bytes:
    """What the program writes until it exits (read as it comes, so that it never waits on a full
    terminal), and a little after."""
    seen, deadline = b"", time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        seen += _read_until(fd, b"\0never", 0.1)
    proc.wait(max(0.1, deadline - time.monotonic()))
    return seen + _read_until(fd, b"\x1b[?1049l", 1)


@pytest.fixture
def live(start_scheduler):
    s = start_scheduler("--mode", "serial", "--tq", "30", nvml=TWO_GPUS)
    clients = start_clients(s.sock)
    yield s
    for c in clients:
        c.close()


@pytest.mark.parametrize("leave", ["q", "ctrl-c"])
def test_live_view_in_a_terminal_leaves_on_q_or_ctrl_c(live, tty_pair, leave):
    master, slave = tty_pair
    before = termios.tcgetattr(slave)
    p = subprocess.Popen([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(live.sock), "top",
                          "--interval", "0.2"], stdin=slave, stdout=slave, stderr=slave,
                         env=child_env({"COLUMNS": "100", "LINES": "40", "TERM": "xterm"}),
                         start_new_session=True, preexec_fn=_interruptible)
    try:
        seen = _read_until(master, b"Clients", 20)
        assert b"GPU 0" in seen and b"serial: serialised" in seen, seen[-2000:]
        if leave == "q":
            os.write(master, b"q")
        else:
            os.killpg(p.pid, signal.SIGINT)
        rest = _drain_until_exit(master, p, 10)  # never let a full terminal hold its last writes
        assert p.returncode == 0
        assert b"\x1b[?1049l" in seen + rest  # the alternate screen was left
        assert b"Traceback" not in seen + rest
    finally:
        if p.poll() is None:
            p.kill()
    assert termios.tcgetattr(slave) == before
