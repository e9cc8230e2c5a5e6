"""The library connects only to a scheduler socket it can trust (native/src/session/socktrust.c).

A socket whose directory is a symbolic link, not ours (nor root's), or writable by others without
the sticky bit, or that is itself a symbolic link, not a socket, or not ours (nor root's), is not
connected to: ONE warning names the path and the reason, and the program runs ungated to the end.
Ownership by another user can only be arranged by root; those tests are skipped otherwise.
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from xpushare.wire.protocol import MessageType

from .fake_scheduler import RecordingScheduler
from .harness import clean_env

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can make a path owned by another user")
OTHER_UID = 4242  # a uid that owns nothing here (not the test's)

STEPS = ("init", "ctx", 0, "launch", 3, "launch", 2)


def _warnings(app):
    return [ln for ln in app.stderr().splitlines() if ln.startswith(f"nvshare[{app.pid}]: warning")]


def _runs_ungated_with_one_warning(world, sock, rec, reason):
    """Run STEPS against `sock`: they complete, the scheduler behind it sees nobody, and stderr has
    exactly one line: the warning that names `sock` and `reason`."""
    app = world.run(*STEPS, env={"NVSHARE_SOCK_PATH": sock})
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    assert len(world.log.entries(app.pid, "cuLaunchKernel")) == 5, "the work ran (ungated)"
    if rec is not None:
        assert rec.connections() == 0 and rec.received == [], "never connected to the untrusted socket"
    lines = app.stderr().splitlines()
    assert lines == [
        f"nvshare[{app.pid}]: warning: not using the scheduler socket {sock}: {reason}; running "
        "ungated (GPU work is not scheduled) and retrying in the background. To be scheduled, use a "
        "socket in a directory you own: set XDG_RUNTIME_DIR, or NVSHARE_SOCK_PATH"], lines
    return app


@pytest.fixture
def recorders():
    recs = []
    yield lambda path: recs.append(RecordingScheduler(path)) or recs[-1]
    for r in recs:
        r.close()


def test_directory_writable_by_others_without_sticky_bit(world, recorders):
    d = world.dir / "open"
    d.mkdir()
    d.chmod(0o777)
    rec = recorders(d / "s.sock")
    _runs_ungated_with_one_warning(
        world, d / "s.sock", rec,
        f"its directory {d} is writable by other users (mode 0777) without the sticky bit")


def test_sticky_directory_writable_by_others_is_trusted(world, recorders):
    """As /tmp: others cannot rename or remove what is ours there."""
    d = world.dir / "sticky"
    d.mkdir()
    d.chmod(0o1777)
    rec = recorders(d / "s.sock")
    app = world.run(*STEPS, env={"NVSHARE_SOCK_PATH": d / "s.sock"})
    assert [m.type for m in rec.received][:1] == [MessageType.HELLO]
    assert _warnings(app) == []


def test_symbolic_link_to_a_socket(world, recorders):
    real = world.dir / "real"
    real.mkdir(mode=0o700)
    rec = recorders(real / "s.sock")
    link = world.dir / "link.sock"
    link.symlink_to(real / "s.sock")
    _runs_ungated_with_one_warning(world, link, rec, "it is a symbolic link")


def test_directory_that_is_a_symbolic_link(world, recorders):
    real = world.dir / "real"
    real.mkdir(mode=0o700)
    rec = recorders(real / "s.sock")
    (world.dir / "linkdir").symlink_to(real)
    _runs_ungated_with_one_warning(world, world.dir / "linkdir" / "s.sock", rec,
                                   f"its directory {world.dir / 'linkdir'} is a symbolic link")


def test_path_that_is_not_a_socket(world, recorders):
    sock = world.dir / "file.sock"
    sock.write_text("not a socket")
    _runs_ungated_with_one_warning(world, sock, None, "it is not a socket")


def test_root_owned_directory_is_trusted(world):
    """Root's directories are trusted (/var/run/nvshare): a missing socket there is the plain
    'cannot reach' warning, not a trust warning."""
    assert os.lstat("/").st_uid == 0
    app = world.run("init", "ctx", 0, "launch", 1, env={"NVSHARE_SOCK_PATH": "/nvshare-test-none.sock"})
    (w,) = _warnings(app)
    assert "cannot reach the scheduler at /nvshare-test-none.sock (No such file or directory)" in w, w


def test_warned_once_while_retrying(world, recorders):
    d = world.dir / "open"
    d.mkdir()
    d.chmod(0o777)
    rec = recorders(d / "s.sock")
    app = world.app("init", "ctx", 0, "launch", 1, "sleep", 3500, "launch", 1,
                    env={"NVSHARE_SOCK_PATH": d / "s.sock", "NVSHARE_DEBUG": 1})
    assert app.finish() == 0
    retries = [ln for ln in app.stderr().splitlines() if "reconnect to" in ln]
    assert len(retries) >= 2, app.stderr()  # it did retry (1 s, 2 s) ...
    assert len(_warnings(app)) == 1, app.stderr()  # ... and said it once
    assert rec.connections() == 0


@needs_root
def test_directory_owned_by_another_user(world, recorders):
    d = world.dir / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, OTHER_UID, OTHER_UID)
    rec = recorders(d / "s.sock")
    os.chmod(d / "s.sock", 0o666)
    _runs_ungated_with_one_warning(
        world, d / "s.sock", rec,
        f"its directory {d} is owned by uid {OTHER_UID}, not by you (uid 0) or root")


@needs_root
def test_socket_owned_by_another_user(world, recorders):
    d = world.dir / "ours"
    d.mkdir(mode=0o700)
    rec = recorders(d / "s.sock")
    os.lchown(d / "s.sock", OTHER_UID, OTHER_UID)
    _runs_ungated_with_one_warning(world, d / "s.sock", rec,
                                   f"it is owned by uid {OTHER_UID}, not by you (uid 0) or root")


@pytest.fixture
def victim(artifacts, nvshare_lib):
    """A victim uid with no XDG_RUNTIME_DIR, an attacker uid that pre-created the victim's
    /tmp/nvshare-UID, and a copy of the test program and libraries the victim can read."""
    uid = next(u for u in range(61000, 62000, 2)
               if not os.path.lexists(f"/tmp/nvshare-{u}") and not os.path.lexists(f"/tmp/nvshare-{u + 1}"))
    stage = Path(tempfile.mkdtemp(prefix="nvs-victim-"))
    stage.chmod(0o755)
    for src, name in ((artifacts.app, "cuda_app"), (artifacts.libcuda, "libcuda.so.1"),
                      (nvshare_lib, "libnvshare.so")):
        shutil.copy(src, stage / name)
    planted = Path(f"/tmp/nvshare-{uid}")
    yield uid, uid + 1, stage, planted
    shutil.rmtree(planted, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)


@needs_root
@pytest.mark.skipif(os.path.exists("/var/run/nvshare/scheduler.sock"),
                    reason="a system scheduler would be the victim's next candidate")
def test_precreated_per_user_directory_is_not_used(victim, recorders):
    """The attack: another user creates /tmp/nvshare-VICTIM before the victim does and listens there.
    The victim's program (XDG_RUNTIME_DIR unset, no NVSHARE_SOCK_PATH) must not connect to it."""
    uid, attacker, stage, planted = victim
    planted.mkdir(mode=0o755)
    os.chown(planted, attacker, attacker)
    rec = recorders(planted / "scheduler.sock")
    os.chmod(planted / "scheduler.sock", 0o666)
    os.lchown(planted / "scheduler.sock", attacker, attacker)
    env = clean_env(LD_PRELOAD=stage / "libnvshare.so", LD_LIBRARY_PATH=stage)
    env.pop("XDG_RUNTIME_DIR", None)
    r = subprocess.run([stage / "cuda_app", *map(str, STEPS)], env=env, user=uid, group=uid,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    launches = [json.loads(ln) for ln in r.stdout.splitlines() if '"launch"' in ln]
    assert [s["ret"] for s in launches] == [0, 0], r.stdout
    assert rec.connections() == 0 and rec.received == [], "the victim connected to the attacker"
    (line,) = r.stderr.splitlines()  # one warning, no "cannot reach" line after it
    assert (f"warning: not using the scheduler socket {planted}/scheduler.sock: its directory "
            f"{planted} is owned by uid {attacker}, not by you (uid {uid}) or root; running ungated") in line, line
    assert "To be scheduled, use a socket in a directory you own" in line
