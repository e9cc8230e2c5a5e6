"""xpushare.sizes and xpushare.paths."""

import os
from pathlib import Path

import pytest

from xpushare import paths
from xpushare.sizes import format_size, parse_size


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
    packaged = Path(paths.__file__).resolve().parent / "lib" / "libnvshare.so"
    if packaged.is_file():
        assert paths.library_path() == packaged
    else:
        with pytest.raises(FileNotFoundError, match="native library"):
            paths.library_path()


def test_ensure_socket_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "umask", os.umask)  # keep the umask as it is
    old = os.umask(0o077)
    try:
        paths.ensure_socket_dir(tmp_path / "a" / "b" / "s.sock")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o755
    paths.ensure_socket_dir(tmp_path / "a" / "b" / "s.sock")  # exists: fine


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_ensure_socket_dir_refuses_a_directory_of_another_user(tmp_path):
    d = tmp_path / "planted"
    d.mkdir()
    os.chown(d, 65534, 65534)
    with pytest.raises(PermissionError, match="owned by uid 65534"):
        paths.ensure_socket_dir(d / "s.sock")


def test_status_table_keeps_state_whole_next_to_a_long_command():
    """A long command line gives way; the state, GPU and memory cells are never cut."""
    import io

    from xpushare.ctl import render_status

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
