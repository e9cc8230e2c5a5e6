"""The socket trust rule on the Python side (paths.socket_trusted, the library's rule): nvshare-run
neither probes nor starts a scheduler on a socket it must not trust, and the scheduler refuses a
socket directory that clients would not trust, saying whose it is and what to do."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sched_harness import child_env
from xpushare.wire.paths import ensure_socket_dir, socket_trusted

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can make a path owned by another user")
OTHER_UID = 4242
ME = os.geteuid()
FIX = "To be scheduled, use a socket in a directory you own: set XDG_RUNTIME_DIR, or NVSHARE_SOCK_PATH (--socket)"


class Listener:
    """A bare listening Unix socket that counts who connected."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.setblocking(False)

    def connections(self) -> int:
        n = 0
        while True:
            try:
                c, _ = self.sock.accept()
            except BlockingIOError:
                return n
            c.close()
            n += 1

    def close(self):
        self.sock.close()


@pytest.fixture
def listen():
    opened = []
    yield lambda path: opened.append(Listener(path)) or opened[-1]
    for x in opened:
        x.close()


# ------------------------------------------------------------------ the rule


def test_own_socket_in_own_private_directory_is_trusted(sockdir, listen):
    d = sockdir / "mine"
    d.mkdir(mode=0o700)
    listen(d / "s.sock")
    assert socket_trusted(d / "s.sock") is None


def test_missing_paths_are_not_a_finding(sockdir):
    assert socket_trusted(sockdir / "none.sock") is None
    assert socket_trusted(sockdir / "nodir" / "none.sock") is None


def test_others_writable_directory_needs_the_sticky_bit(sockdir, listen):
    d = sockdir / "open"
    d.mkdir()
    listen(d / "s.sock")
    for mode, expected in ((0o777, f"its directory {d} is writable by other users (mode 0777) without "
                                   "the sticky bit"),
                           (0o775, f"its directory {d} is writable by other users (mode 0775) without "
                                   "the sticky bit"),
                           (0o1777, None), (0o755, None)):
        d.chmod(mode)
        assert socket_trusted(d / "s.sock") == expected, oct(mode)


def test_symbolic_links_and_non_sockets(sockdir, listen):
    real = sockdir / "real"
    real.mkdir(mode=0o700)
    listen(real / "s.sock")
    (sockdir / "link.sock").symlink_to(real / "s.sock")
    (sockdir / "linkdir").symlink_to(real)
    (sockdir / "file.sock").write_text("")
    assert socket_trusted(sockdir / "link.sock") == "it is a symbolic link"
    assert socket_trusted(sockdir / "linkdir" / "s.sock") == \
        f"its directory {sockdir / 'linkdir'} is a symbolic link"
    assert socket_trusted(sockdir / "file.sock") == "it is not a socket"
    assert socket_trusted(sockdir / "file.sock" / "s.sock") == f"{sockdir / 'file.sock'} is not a directory"


def test_root_owned_directory_is_trusted():
    assert os.lstat("/").st_uid == 0 and socket_trusted("/nvshare-test-none.sock") is None


@needs_root
def test_another_users_directory_or_socket_is_not_trusted(sockdir, listen):
    d = sockdir / "theirs"
    d.mkdir(mode=0o755)
    listen(d / "s.sock")
    os.chown(d, OTHER_UID, OTHER_UID)
    assert socket_trusted(d / "s.sock") == \
        f"its directory {d} is owned by uid {OTHER_UID}, not by you (uid 0) or root"
    os.chown(d, 0, 0)
    os.lchown(d / "s.sock", OTHER_UID, OTHER_UID)
    assert socket_trusted(d / "s.sock") == f"it is owned by uid {OTHER_UID}, not by you (uid 0) or root"


# ------------------------------------------------------------------ the scheduler's start


def _start_scheduler(sock: Path, env=None):
    return subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--no-nvml", "--socket", str(sock)],
                          env=child_env(env), capture_output=True, text=True, timeout=30)


def test_scheduler_refuses_a_directory_clients_would_not_trust(sockdir):
    d = sockdir / "open"
    d.mkdir()
    d.chmod(0o777)
    r = _start_scheduler(d / "s.sock")
    assert r.returncode == 1
    assert (f"cannot use the socket directory {d}: {d} is writable by other users (mode 0777) without "
            "the sticky bit; clients would not trust a scheduler there") in r.stderr, r.stderr
    assert "Use a socket in a directory you own: set XDG_RUNTIME_DIR, or NVSHARE_SOCK_PATH (--socket)" \
        in r.stderr
    assert not (d / "s.sock").exists()


@needs_root
def test_scheduler_names_the_owner_of_another_users_directory(sockdir):
    d = sockdir / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, OTHER_UID, OTHER_UID)
    with pytest.raises(PermissionError) as e:
        ensure_socket_dir(d / "s.sock")
    assert str(e.value).startswith(
        f"cannot use the socket directory {d}: {d} is owned by uid {OTHER_UID}, not by you (uid 0) or "
        "root; clients would not trust a scheduler there (another user may have created it")
    r = _start_scheduler(d / "s.sock")
    assert r.returncode == 1 and str(e.value) in r.stderr, r.stderr


# ------------------------------------------------------------------ nvshare-run


@pytest.fixture
def fake_lib():
    d = Path(tempfile.mkdtemp(prefix="nvs-lib-"))
    d.chmod(0o755)
    (d / "empty.c").write_text("int nvshare_test_marker;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libnvshare.so"), str(d / "empty.c")],
                   check=True)
    yield d / "libnvshare.so"
    shutil.rmtree(d, ignore_errors=True)


def _nvshare_run(*args, lib, env=None, **kw):
    # a driver library that loads (this machine may have none): nvshare-run would warn otherwise
    e = child_env({"NVSHARE_LIBRARY": str(lib), "NVSHARE_CUDA_LIBRARY": str(lib), **(env or {})})
    for k in ("LD_PRELOAD", "NVSHARE_DEBUG"):
        e.pop(k, None)
    return subprocess.run([sys.executable, "-m", "xpushare.cli.run", *map(str, args)], env=e,
                          capture_output=True, text=True, timeout=60, **kw)


def test_nvshare_run_does_not_use_an_untrusted_socket(sockdir, listen, fake_lib):
    d = sockdir / "open"
    d.mkdir()
    d.chmod(0o777)
    planted = listen(d / "s.sock")
    r = _nvshare_run("--socket", d / "s.sock", "--", "sh", "-c", "echo ran; exit 3", lib=fake_lib)
    assert r.returncode == 3 and r.stdout == "ran\n", r.stderr
    assert r.stderr.splitlines() == [
        f"nvshare-run: warning: not using the scheduler socket {d / 's.sock'}: its directory {d} is "
        "writable by other users (mode 0777) without the sticky bit; running the command without a "
        f"scheduler (GPU work is not scheduled). {FIX}"]
    assert planted.connections() == 0, "not even probed"
    assert not (d / "scheduler.log").exists(), "and no scheduler started there"


@needs_root
@pytest.mark.skipif(os.path.exists("/var/run/nvshare/scheduler.sock"),
                    reason="a system scheduler would answer the victim")
def test_nvshare_run_of_a_victim_whose_per_user_directory_was_planted(listen, monkeypatch, capsys):
    """The attack, as nvshare-run meets it: /tmp/nvshare-VICTIM pre-created by another uid. The
    victim is this process with its effective uid seen as VICTIM by paths.py (the interpreter here
    may not be executable by another uid), with XDG_RUNTIME_DIR and NVSHARE_SOCK_PATH unset."""
    from xpushare.cli import run
    from xpushare.wire import paths
    uid = next(u for u in range(61000, 62000, 2)
               if not os.path.lexists(f"/tmp/nvshare-{u}") and not os.path.lexists(f"/tmp/nvshare-{u + 1}"))
    monkeypatch.setattr(paths, "_euid", lambda: uid)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("NVSHARE_SOCK_PATH", raising=False)
    planted = Path(f"/tmp/nvshare-{uid}")
    planted.mkdir(mode=0o755)
    try:
        os.chown(planted, uid + 1, uid + 1)
        attacker = listen(planted / "scheduler.sock")
        os.lchown(planted / "scheduler.sock", uid + 1, uid + 1)
        run.ensure_scheduler(None, no_start=False)
        assert capsys.readouterr().err.splitlines() == [
            f"nvshare-run: warning: not using the scheduler socket {planted}/scheduler.sock: its "
            f"directory {planted} is owned by uid {uid + 1}, not by you (uid {uid}) or root; running the "
            f"command without a scheduler (GPU work is not scheduled). {FIX}"]
        assert attacker.connections() == 0
        assert sorted(p.name for p in planted.iterdir()) == ["scheduler.sock"], "nothing started there"
    finally:
        shutil.rmtree(planted, ignore_errors=True)
