"""nvshare-run: environment, LD_PRELOAD, allocator recipes, scheduler auto-start, errors."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from sched_harness import child_env
from testkit.waiting import poll
from xpushare.cli.client import CtlClient, socket_answers
from xpushare.cli.run import IDLE_EXIT_SECONDS

PRINT_ENV = [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"]


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    """A real (empty) shared object named libnvshare.so, so the loader preloads it quietly."""
    d = tmp_path_factory.mktemp("lib")
    lib = d / "libnvshare.so"
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc:
        (d / "empty.c").write_text("int nvshare_test_marker;\n")
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(d / "empty.c")], check=True)
    else:
        lib.write_bytes(b"")
    return lib


def run(*args, lib, env=None, clean=True):
    # a driver library that loads (this machine may have none): nvshare-run would warn otherwise
    base = {"NVSHARE_LIBRARY": str(lib), "NVSHARE_CUDA_LIBRARY": str(lib)}
    e = child_env({**base, **(env or {})})
    if clean:
        for k in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                  "XLA_PYTHON_CLIENT_ALLOCATOR",
                  "XLA_PYTHON_CLIENT_PREALLOCATE", "NVSHARE_DEBUG", "NVSHARE_GPU_MEMORY",
                  "NVSHARE_ENABLE_SINGLE_OVERSUB"):
            if k not in (env or {}):
                e.pop(k, None)
    return subprocess.run([sys.executable, "-m", "xpushare.cli.run", *map(str, args)], env=e,
                          capture_output=True, text=True, timeout=60)


def child_environment(r):
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_print_lib(fake_lib):
    r = run("--print-lib", lib=fake_lib)
    assert r.returncode == 0 and r.stdout.strip() == str(fake_lib)


def test_print_lib_without_a_library(tmp_path):
    r = run("--print-lib", lib=tmp_path / "missing.so")
    assert r.returncode == 1 and "not found" in r.stderr


def test_environment_of_the_command(fake_lib, scheduler):
    r = run("--socket", scheduler.sock, "--gpu-memory", "16GiB", "--single-oversub", "--debug", "--",
            *PRINT_ENV, lib=fake_lib)
    env = child_environment(r)
    assert env["LD_PRELOAD"] == str(fake_lib)
    assert env["NVSHARE_GPU_MEMORY"] == str(16 << 30)
    assert env["NVSHARE_ENABLE_SINGLE_OVERSUB"] == "1"
    assert env["NVSHARE_DEBUG"] == "1"
    assert env["NVSHARE_SOCK_PATH"] == str(scheduler.sock)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    assert env["XLA_PYTHON_CLIENT_ALLOCATOR"] == "platform"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert r.stderr == ""


def test_flags_not_given_set_nothing(fake_lib, scheduler):
    env = child_environment(run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib))
    for k in ("NVSHARE_GPU_MEMORY", "NVSHARE_ENABLE_SINGLE_OVERSUB", "NVSHARE_DEBUG"):
        assert k not in env


def test_ld_preload_is_prepended_without_duplicates(fake_lib, tmp_path, scheduler):
    other = tmp_path / "libother.so"
    shutil.copy(fake_lib, other)
    env = child_environment(run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib,
                                env={"LD_PRELOAD": f"{other} {fake_lib}"}))
    assert env["LD_PRELOAD"] == f"{fake_lib}:{other}"
    env = child_environment(run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib,
                                env={"LD_PRELOAD": str(other)}))
    assert env["LD_PRELOAD"] == f"{fake_lib}:{other}"


@pytest.mark.parametrize("conf, warns", [
    ("expandable_segments:True", True),
    ("backend:cudaMallocAsync", False),  # its pool allocations are converted like cudaMalloc's
    ("garbage_collection_threshold:0.8,max_split_size_mb:128", False),
])
def test_user_set_pytorch_allocator_conf_is_respected(fake_lib, scheduler, conf, warns):
    r = run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib,
            env={"PYTORCH_CUDA_ALLOC_CONF": conf})
    assert child_environment(r)["PYTORCH_CUDA_ALLOC_CONF"] == conf
    assert ("warning" in r.stderr and "VMM" in r.stderr) == warns, r.stderr


@pytest.mark.parametrize("conf, warns", [
    ("expandable_segments:True", True),
    ("max_split_size_mb:128", False),
])
def test_the_newer_pytorch_variable_is_kept_and_not_overridden(fake_lib, scheduler, conf, warns):
    """PYTORCH_ALLOC_CONF is the newer name of PYTORCH_CUDA_ALLOC_CONF: a user's value there is the
    user's choice, and the recipe is not set beside it under the older name."""
    r = run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib,
            env={"PYTORCH_ALLOC_CONF": conf})
    env = child_environment(r)
    assert env["PYTORCH_ALLOC_CONF"] == conf and "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert (f"warning: PYTORCH_ALLOC_CONF={conf} makes PyTorch" in r.stderr) == warns, r.stderr


def test_user_set_jax_variables_are_respected(fake_lib, scheduler):
    env = child_environment(run("--socket", scheduler.sock, "--", *PRINT_ENV, lib=fake_lib,
                                env={"XLA_PYTHON_CLIENT_ALLOCATOR": "bfc",
                                     "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}))
    assert (env["XLA_PYTHON_CLIENT_ALLOCATOR"], env["XLA_PYTHON_CLIENT_PREALLOCATE"]) == ("bfc", "true")


def test_exit_status_and_arguments_pass_through(fake_lib, scheduler):
    r = run("--socket", scheduler.sock, "--", "sh", "-c", 'echo "$1|$2"; exit 7', "sh", "a b", "-x",
            lib=fake_lib)
    assert r.returncode == 7 and r.stdout == "a b|-x\n"


def test_existing_scheduler_is_used_not_restarted(fake_lib, scheduler):
    r = run("--socket", scheduler.sock, "--", "true", lib=fake_lib)
    assert r.returncode == 0 and "started a scheduler" not in r.stderr
    assert not (scheduler.sock.parent / "scheduler.log").exists()
    with CtlClient(scheduler.sock) as c:
        assert c.request("status")["scheduler"]["pid"] == scheduler.proc.pid


def _stop(pid):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    poll(lambda: not os.path.exists(f"/proc/{pid}") or
         open(f"/proc/{pid}/stat").read().split()[2] == "Z", what="scheduler exit")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_starts_a_scheduler_when_none_answers(fake_lib, sockdir, how):
    sock = sockdir / "run" / "s.sock"
    args, env = (["--socket", sock], {}) if how == "flag" else ([], {"NVSHARE_SOCK_PATH": str(sock)})
    r = run(*args, "--", *PRINT_ENV, lib=fake_lib, env=env)
    assert socket_answers(sock), r.stderr
    with CtlClient(sock) as c:
        pid = c.request("status")["scheduler"]["pid"]
    try:
        assert f"started a scheduler (pid {pid})" in r.stderr
        assert child_environment(r)["NVSHARE_SOCK_PATH"] == str(sock)
        log = (sock.parent / "scheduler.log").read_text()
        assert "listening on" in log
        # It runs detached from nvshare-run: its own session; and it exits once idle.
        assert os.getsid(pid) == pid
        argv = open(f"/proc/{pid}/cmdline").read().split("\0")
        assert argv[argv.index("--exit-when-idle") + 1] == str(IDLE_EXIT_SECONDS)
        assert f"it exits {IDLE_EXIT_SECONDS} s after its last client" in r.stderr
        # A second run uses it.
        r2 = run(*args, "--", "true", lib=fake_lib, env=env)
        assert r2.returncode == 0 and "started a scheduler" not in r2.stderr
    finally:
        _stop(pid)


def test_no_start_does_not_start_one(fake_lib, sockdir):
    sock = sockdir / "run" / "s.sock"
    r = run("--no-start", "--socket", sock, "--", "echo", "ran", lib=fake_lib)
    assert r.returncode == 0 and r.stdout == "ran\n"
    assert not sock.exists() and not (sock.parent / "scheduler.log").exists()


def test_scheduler_that_cannot_start_is_a_warning_and_the_command_still_runs(fake_lib, sockdir):
    sock = sockdir / "run" / "s.sock"
    r = run("--socket", sock, "--", "sh", "-c", "echo ran; exit 3", lib=fake_lib,
            env={"NVSHARE_METRICS_PORT": "many"})  # the scheduler refuses it and exits
    assert r.returncode == 3 and r.stdout == "ran\n"  # the command ran, its status passes through
    assert "warning: the scheduler did not start" in r.stderr and "without one" in r.stderr
    assert "NVSHARE_METRICS_PORT" in (sock.parent / "scheduler.log").read_text()


def test_a_socket_path_too_long_is_a_warning_and_nothing_is_created(fake_lib, sockdir):
    sock = sockdir / ("x" * 120) / "s.sock"  # too long for a Unix socket address
    r = run("--socket", sock, "--", "sh", "-c", "echo ran; exit 3", lib=fake_lib)
    assert r.returncode == 3 and r.stdout == "ran\n"
    assert "a Unix socket's address holds at most 107" in r.stderr and "without a scheduler" in r.stderr
    assert not sock.parent.exists()


def test_a_log_that_cannot_be_opened_is_a_warning_and_the_command_still_runs(fake_lib, sockdir):
    sock = sockdir / "run" / "s.sock"
    (sock.parent / "scheduler.log").mkdir(parents=True)  # a directory in the log file's place
    r = run("--socket", sock, "--", "sh", "-c", "echo ran; exit 3", lib=fake_lib)
    assert r.returncode == 3 and r.stdout == "ran\n"
    assert "Traceback" not in r.stderr
    assert f"warning: cannot start a scheduler on {sock}" in r.stderr, r.stderr


def test_a_path_that_is_not_a_socket_is_a_warning_and_the_command_still_runs(fake_lib, sockdir):
    sock = sockdir / "s.sock"
    sock.write_text("a regular file in the way")
    r = run("--socket", sock, "--", "sh", "-c", "echo ran; exit 3", lib=fake_lib)
    assert r.returncode == 3 and r.stdout == "ran\n"  # the command ran, its status passes through
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"nvshare-run: warning: not using the scheduler socket {sock}: it is not "
                           "a socket; running the command without a scheduler"), line
    assert not (sockdir / "scheduler.log").exists(), "no scheduler is started on it"
    assert sock.read_text() == "a regular file in the way"


def test_missing_command_is_usage_error(fake_lib):
    for args in ([], ["--"], ["--debug", "--"]):
        r = run(*args, lib=fake_lib)
        assert r.returncode == 2 and "usage: nvshare-run" in r.stderr, args


def test_unknown_command_exits_127_without_starting_a_scheduler(fake_lib, sockdir):
    sock = sockdir / "s.sock"
    r = run("--socket", sock, "--", "no-such-command-xyz", lib=fake_lib)
    assert r.returncode == 127 and "no-such-command-xyz: command not found" in r.stderr
    assert not sock.exists()


def test_bad_size_is_usage_error(fake_lib):
    r = run("--gpu-memory", "huge", "--", "true", lib=fake_lib)
    assert r.returncode == 2 and "invalid size" in r.stderr


def test_without_a_driver_one_line_says_so_and_the_command_runs(fake_lib, scheduler):
    r = run("--socket", scheduler.sock, "--no-start", "--", sys.executable, "-c", "print('ran')",
            lib=fake_lib, env={"NVSHARE_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr
    said = [ln for ln in r.stderr.splitlines() if "no NVIDIA driver found" in ln]
    assert len(said) == 1 and "/nonexistent/libcuda.so.1" in said[0] and "nothing is shared" in said[0]
