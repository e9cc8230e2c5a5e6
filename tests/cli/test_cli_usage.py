"""Usage errors and the values the tools accept: a short usage line and a pointer to --help, the
reserve as a percentage, sizes that mean something, commands that cannot be run (the shell's 126
and 127), and what the scheduler says when it cannot make its socket."""

import os
import subprocess
import sys

import pytest

from sched_harness import SchedulerProcess, as_user, child_env
from xpushare.scheduler import __main__ as scheduler_main
from xpushare.scheduler.node.state import Config
from xpushare.scheduler.node.registry import GpuRegistry
from xpushare.scheduler.policy import RESERVE_FRACTION

GiB = 1 << 30


def tool(module, *args, env=None):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], env=child_env(env),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("module,prog,args", [
    ("xpushare.cli.ctl", "nvsharectl", ["-T", "0"]),
    ("xpushare.cli.ctl", "nvsharectl top", ["top", "--interval", "0"]),
    ("xpushare.cli.run", "nvshare-run", ["--bogus", "--", "true"]),
    ("xpushare.cli.run", "nvshare-run", []),
    ("xpushare.scheduler", "nvshare-scheduler", ["--tq", "0"]),
])
def test_a_usage_error_is_three_lines_pointing_at_help(module, prog, args):
    r = tool(module, *args)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 3, r.stderr
    assert lines[0].startswith(f"usage: {prog} ") and lines[1].startswith(f"{prog}: error: ")
    assert lines[2] == f"Try '{prog} --help' for more information."


def test_help_still_shows_every_option():
    r = tool("xpushare.cli.ctl", "--help")
    assert r.returncode == 0 and "--set-memory-limit" in r.stdout and "shutdown" in r.stdout


# -- the scheduler's --reserve ------------------------------------------------------------------

@pytest.mark.parametrize("text,reserve", [("5%", (None, 0.05)), ("12.5%", (None, 0.125)),
                                          ("0%", (None, 0.0)), ("2GiB", (2 * GiB, None))])
def test_reserve_is_a_size_or_a_percentage(text, reserve):
    assert scheduler_main.build_parser().parse_args(["--reserve", text]).reserve == reserve


@pytest.mark.parametrize("text", ["100%", "-1%", "nan%", "%", "lots"])
def test_a_bad_reserve_is_a_usage_error(text):
    r = tool("xpushare.scheduler", f"--reserve={text}")
    assert r.returncode == 2 and "a percentage of the capacity" in r.stderr, r.stderr


def test_a_reserve_percentage_is_of_each_gpus_capacity():
    registry = GpuRegistry(Config(socket_path="/nonexistent", reserve_fraction=0.25))
    gpu = registry.add("GPU-a", 0, "A", 16 * GiB)
    assert gpu.arbiter.reserve == 4 * GiB and gpu.arbiter.budget == 12 * GiB
    default = GpuRegistry(Config(socket_path="/nonexistent")).add("GPU-b", 0, "B", 20 * GiB)
    assert default.arbiter.reserve == int(20 * GiB * RESERVE_FRACTION)


def test_the_scheduler_starts_with_the_default_reserve_spelt_out(start_scheduler):
    s = start_scheduler("--no-nvml", "--reserve", "5%")
    assert s.ctl("ping")["ok"]


# -- nvshare-run --------------------------------------------------------------------------------

def run(*args, env=None):
    lib = os.path.join(sys.prefix, "missing-is-fine.so")
    return tool("xpushare.cli.run", "--no-start", *args, env={"NVSHARE_LIBRARY": lib, **(env or {})})


def test_gpu_memory_zero_is_refused():
    r = run("--gpu-memory", "0", "--", "true")
    assert r.returncode == 2 and "more than 0 bytes" in r.stderr


def test_print_lib_with_a_command_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    r = run("--print-lib", "--", "touch", marker)
    assert r.returncode == 2 and "--print-lib" in r.stderr and r.stdout == ""
    assert not marker.exists()


@pytest.fixture
def runnable_lib(tmp_path):
    lib = tmp_path / "libnvshare.so"
    lib.write_bytes(b"")  # only looked for; the commands below are never executed
    return {"NVSHARE_LIBRARY": str(lib)}


def test_a_file_that_is_not_executable_exits_126(tmp_path, runnable_lib):
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    by_path = run("--", script, env=runnable_lib)
    assert by_path.returncode == 126 and f"{script}: permission denied" in by_path.stderr
    on_path = run("--", "job.sh", env={**runnable_lib, "PATH": f"{tmp_path}:{os.defpath}"})
    assert on_path.returncode == 126 and "job.sh: permission denied" in on_path.stderr
    directory = run("--", tmp_path, env=runnable_lib)
    assert directory.returncode == 126 and "is a directory" in directory.stderr
    missing = run("--", tmp_path / "nope", env=runnable_lib)
    assert missing.returncode == 127 and "command not found" in missing.stderr


# -- the scheduler's socket ---------------------------------------------------------------------

def test_a_socket_path_too_long_is_refused_before_any_directory_is_made(sockdir):
    sock = sockdir / ("x" * 120) / "s.sock"
    p = SchedulerProcess(sock, ["--no-nvml"], logfile=sockdir / "s.log").start(wait=False)
    assert p.proc.wait(20) == 1
    assert "bytes long and a Unix socket's address holds at most 107" in p.log()
    assert not sock.parent.exists()


def test_the_directories_made_for_the_socket_are_named(sockdir):
    p = SchedulerProcess(sockdir / "a" / "b" / "s.sock", ["--no-nvml"],
                         logfile=sockdir / "s.log").start()
    try:
        log = p.log()
        assert f"created the socket directory {sockdir / 'a'} (mode 07" in log
        assert f"created the socket directory {sockdir / 'a' / 'b'} (mode 07" in log
    finally:
        p.stop()


def _serve_as_another_user(sock: str, log: str) -> int:
    import logging
    logging.getLogger().handlers.clear()  # pytest's: the scheduler's own goes to stderr, here log
    sys.stderr = open(log, "a")
    try:
        return scheduler_main.main(["--no-nvml", "--socket", sock])
    finally:
        sys.stderr.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_a_socket_directory_not_writable_says_which_and_what_to_do(sockdir):
    d = sockdir / "roots"
    d.mkdir(mode=0o755)  # root's, as /var/run/nvshare is
    log = sockdir / "nobody.log"
    log.write_text("")
    log.chmod(0o666)
    assert as_user(65534, 65534, _serve_as_another_user, str(d / "s.sock"), str(log)) == 1
    text = log.read_text()
    assert f"cannot listen on {d / 's.sock'}: permission denied; choose a socket in a directory " \
           "you may write" in text, text
    assert "[Errno 13]" not in text


def test_the_system_socket_hint(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    e = PermissionError(13, "Permission denied")
    text = scheduler_main._permission_denied("/var/run/nvshare/scheduler.sock", e)
    assert text.startswith("cannot listen on /var/run/nvshare/scheduler.sock: permission denied; "
                           "the system socket is root's")
    assert "/run/user/1000/nvshare/scheduler.sock" in text
