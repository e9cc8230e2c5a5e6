"""xpushare.wire.sizes and xpushare.wire.paths."""

import os
import re
from pathlib import Path

import pytest

import xpushare
from xpushare.wire import paths
from xpushare.wire.sizes import format_size, parse_size


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("1073741824", 1 << 30), ("512MiB", 512 << 20), ("512mb", 512 << 20), ("16G", 16 << 30),
    ("16 GiB", 16 << 30), (" 8gib ", 8 << 30), ("1.5GiB", 3 << 29), ("2T", 2 << 40), ("100b", 100),
    ("1K", 1024), ("1.1KiB", 1126), ("8Gi", 8 << 30), ("512mi", 512 << 20),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "1 GiBs", "1Q", "1.GiB", "ten", "1e9", "1,5G",
                                  "１GiB"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["16777216T", "18446744073709551616", "99999999999999999999999G"])
def test_parse_size_refuses_what_64_bits_cannot_carry(text):
    """As native/src/core/config.c does: a scheduler given such a capacity used to start and then fail
    every ATTACH (its reply cannot be encoded), leaving every client unscheduled."""
    with pytest.raises(ValueError, match="at most"):
        parse_size(text)
    assert parse_size("18446744073709551615") == (1 << 64) - 1
    assert parse_size("16777215.99T") < 1 << 64


def test_the_scheduler_refuses_a_capacity_past_64_bits_as_a_usage_error(capsys):
    from xpushare.scheduler.__main__ import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--no-nvml", "--gpu-memory", "16777216T"])
    assert e.value.code == 2 and "at most" in capsys.readouterr().err


@pytest.mark.parametrize("value, text", [(0, "0B"), (1023, "1023B"), (1536, "1.5KiB"),
                                         (16 << 30, "16GiB"), ((80 << 30) - (20 << 20), "79.98GiB")])
def test_format_size(value, text):
    assert format_size(value) == text


def test_default_socket_paths(monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    monkeypatch.setattr(paths, "_euid", lambda: 1000)
    assert paths.default_socket_path() == Path("/run/user/1000/nvshare/scheduler.sock")
    assert paths.default_socket_path(0) == Path("/var/run/nvshare/scheduler.sock")
    assert paths.default_socket_path(1001) == Path("/tmp/nvshare-1001/scheduler.sock")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert paths.default_socket_path() == Path("/tmp/nvshare-1000/scheduler.sock")


def test_client_candidates(monkeypatch):
    monkeypatch.delenv("NVSHARE_SOCK_PATH", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    monkeypatch.setattr(paths, "_euid", lambda: 1000)
    assert paths.client_socket_candidates() == [Path("/run/user/1000/nvshare/scheduler.sock"),
                                                Path("/var/run/nvshare/scheduler.sock")]
    monkeypatch.setattr(paths, "_euid", lambda: 0)
    assert paths.client_socket_candidates() == [Path("/var/run/nvshare/scheduler.sock")]
    monkeypatch.setenv("NVSHARE_SOCK_PATH", "/x/s.sock")
    assert paths.client_socket_candidates() == [Path("/x/s.sock")]
    assert paths.client_socket_candidates("/y.sock") == [Path("/y.sock")]


def test_library_path(monkeypatch, tmp_path):
    lib = tmp_path / "libnvshare.so"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setenv("NVSHARE_LIBRARY", str(lib))
    assert paths.library_path() == lib
    monkeypatch.setenv("NVSHARE_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="NVSHARE_LIBRARY"):
        paths.library_path()
    monkeypatch.delenv("NVSHARE_LIBRARY")
    # Where the build installs it: native/CMakeLists.txt's DESTINATION, below the directory that
    # holds the xpushare package (site-packages once installed).
    cmake = (Path(__file__).resolve().parents[2] / "native" / "CMakeLists.txt").read_text()
    destination = re.search(r"install\(TARGETS nvshare LIBRARY DESTINATION (\S+)\)", cmake)[1]
    site = Path(xpushare.__file__).resolve().parent.parent
    packaged = site / destination / "libnvshare.so"
    assert paths.PACKAGE_ROOT / paths.LIBRARY_DIR == site / destination
    if packaged.is_file():
        assert paths.library_path() == packaged
    else:
        with pytest.raises(FileNotFoundError, match="native library"):
            paths.library_path()


def test_ensure_socket_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "_euid", lambda: 0)  # root: the system directory
    monkeypatch.setattr(os, "umask", os.umask)  # keep the umask as it is
    old = os.umask(0o077)
    try:
        paths.ensure_socket_dir(tmp_path / "a" / "b" / "s.sock")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o755
    paths.ensure_socket_dir(tmp_path / "a" / "b" / "s.sock")  # exists: fine


def test_per_user_socket_dir_is_private(tmp_path, monkeypatch):
    """Created by a non-root user (e.g. /tmp/nvshare-$UID): 0700, whatever the umask."""
    monkeypatch.setattr(paths, "_euid", lambda: os.geteuid() or 1000)
    monkeypatch.setattr(os, "umask", os.umask)
    old = os.umask(0)
    try:
        paths.ensure_socket_dir(tmp_path / "nvshare-1000" / "x" / "s.sock")
    finally:
        os.umask(old)
    assert (tmp_path / "nvshare-1000").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "nvshare-1000" / "x").stat().st_mode & 0o777 == 0o700


def _make_listening_socket_dir(base: str) -> int:
    """As a non-root user: create a per-user socket dir and a 0666 socket in it; return the mode."""
    import socket
    sock_path = Path(base) / f"nvshare-{os.geteuid()}" / "scheduler.sock"
    paths.ensure_socket_dir(sock_path)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    os.chmod(sock_path, 0o666)
    s.listen()
    return sock_path.parent.stat().st_mode & 0o777


def _try_connect(path: str) -> str:
    import socket
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        return "connected"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other uids")
def test_another_user_cannot_reach_a_per_user_socket(sockdir):
    from sched_harness import as_user
    base = sockdir / "tmp"
    base.mkdir()
    base.chmod(0o1777)  # like /tmp
    assert as_user(65534, 65534, _make_listening_socket_dir, str(base)) == 0o700
    sock = base / "nvshare-65534" / "scheduler.sock"
    assert sock.stat().st_uid == 65534
    # Without the 0700 directory this would be ConnectionRefusedError (the socket is 0666 and
    # nobody listens any more): the directory is what keeps other users out.
    assert as_user(65533, 65533, _try_connect, str(sock)) == "PermissionError"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_ensure_socket_dir_refuses_a_directory_of_another_user(tmp_path):
    d = tmp_path / "planted"
    d.mkdir()
    os.chown(d, 65534, 65534)
    with pytest.raises(PermissionError, match="owned by uid 65534"):
        paths.ensure_socket_dir(d / "s.sock")


def test_chart_probes_run_nvsharectl_ping():
    """The scheduler's liveness and readiness probes (rendered manifests) are `nvsharectl ping`,
    parsed by nvsharectl's own parser: cheap at any number of clients, unlike `status`."""
    import yaml

    from xpushare.cli.ctl import build_parser

    manifests = Path(__file__).resolve().parents[2] / "deploy" / "manifests" / "xpushare.yaml"
    (ds,) = [d for d in yaml.safe_load_all(manifests.read_text())
             if d and d["kind"] == "DaemonSet"
             and d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[0] == "nvsharectl", command
        assert build_parser().parse_args(command[1:]).command == "ping", command


def test_status_table_keeps_state_whole_next_to_a_long_command():
    """A long command line gives way; the state, GPU and memory cells are never cut."""
    import io

    from xpushare.cli.ctl import render_status

    status = {
        "scheduler": {"version": "0.1.0", "pid": 1, "socket": "/s"},
        "gpus": [],
        "clients": [{"pid": 4242, "uid": 1000, "state": "holding",
                     "gpus": [{"index": 0, "state": "holding", "managed_bytes": 5 << 30, "other_bytes": 0}],
                     "pod": None, "pod_hint": None, "command": "python3 " + "x" * 500}],
    }
    out = io.StringIO()
    render_status(status, file=out)
    text = out.getvalue()
    assert "4242" in text and "0:holding" in text and "5GiB" in text, text
    assert "x" * 100 not in text  # the command was shortened instead


def _non_admin_status() -> dict:
    """What a non-admin's status looks like: its own client listed, other users' counted."""
    gpu = {"index": 0, "uuid": "GPU-0", "name": "A", "memory_total": 80 << 30, "capacity": 80 << 30,
           "mode": "auto", "operation": "idle", "tq": 30, "holders": [], "queue": [],
           "other_users_clients": 7, "other_users_bytes": 6 << 30}
    return {"scheduler": {"version": "0.1.0", "pid": 1, "socket": "/s"}, "gpus": [gpu],
            "other_users_clients": 7,
            "clients": [{"client_id": 3, "pid": 4242, "uid": 1000, "state": "idle", "priority": 0,
                         "gpus": [{"device": 0, "index": 0, "uuid": "GPU-0", "state": "idle",
                                   "managed_bytes": 1 << 30, "other_bytes": 0}],
                         "pod": None, "pod_hint": None, "command": "python3 train.py"}]}


def test_status_says_how_many_clients_of_other_users_it_does_not_list():
    import io

    from xpushare.cli.ctl import render_status

    out = io.StringIO()
    render_status(_non_admin_status(), file=out, width=200)
    text = out.getvalue()
    assert "4242" in text
    assert "7 client(s) of other users or pods, not listed (GPU 0: 7); an admin sees them all" in text, text
    empty = {**_non_admin_status(), "clients": [], "gpus": []}
    out = io.StringIO()
    render_status(empty, file=out, width=200)
    assert "No clients of yours." in out.getvalue()


def test_top_counts_other_users_clients_and_their_memory():
    import io

    from rich.console import Console

    from xpushare.cli.ctl_top import Tracker, json_frame, render_frame

    out = io.StringIO()
    Console(file=out, width=200).print(render_frame(_non_admin_status(), Tracker(), 200, None, 0.0))
    text = out.getvalue()
    assert "1 clients: 0 holding, 0 waiting, 1 idle; 7 of other users or pods" in text, text
    assert "clients 7GiB of 80GiB" in text, text  # its own 1 GiB and the others' 6
    frame = json_frame(_non_admin_status())
    assert frame["other_users_clients"] == 7
    assert frame["gpus"][0]["other_users_clients"] == 7 and frame["gpus"][0]["clients_bytes"] == 7 << 30
