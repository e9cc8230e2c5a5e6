"""Small usability promises of nvsharectl and nvshare-run: --version, exit codes, closed pipes."""

import json
import os
import subprocess
import sys

import pytest

from sched_harness import GiB, child_env, uuid
from xpushare import __version__
from xpushare.cli.ctl import refusal_exit_code


def tool(module, *args, env=None):
    argv = [sys.executable, "-m", module, *map(str, args)]
    return subprocess.run(argv, env=child_env(env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("module,prog", [("xpushare.cli.ctl", "nvsharectl"),
                                         ("xpushare.cli.run", "nvshare-run"),
                                         ("xpushare.scheduler", "nvshare-scheduler")])
def test_version(module, prog):
    r = tool(module, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{prog} {__version__}\n"


def test_run_version_among_other_options_before_the_separator():
    r = tool("xpushare.cli.run", "--no-start", "--version", "--", "false")
    assert r.returncode == 0 and r.stdout == f"nvshare-run {__version__}\n"


def test_run_version_after_the_separator_belongs_to_the_command(tmp_path):
    # The command's own --version: nvshare-run does not answer it (here it fails for want of the
    # library, which shows it went on to run the command instead of printing its version).
    r = tool("xpushare.cli.run", "--no-start", "--", "python3", "--version",
             env={"NVSHARE_LIBRARY": str(tmp_path / "missing.so")})
    assert "nvshare-run 0" not in r.stdout and r.returncode == 1 and "not found" in r.stderr


@pytest.fixture
def one_gpu(start_scheduler):
    return start_scheduler("--mode", "serial", "--tq", "30",
                           nvml=[{"uuid": uuid(0), "name": "Fake H100", "memory": 80 * GiB}])


@pytest.mark.parametrize("args,text", [
    (["--set-priority", "5", "--pid", "999999"], "no client with pid 999999"),
    (["--set-priority", "5", "--client", "424242"], "no client with client_id 424242"),
    (["-T", "5", "--gpu", "nosuch"], "no GPU matches"),
    (["--mode", "off", "--gpu", "7"], "no GPU matches"),
    (["--set-gpu-memory", "1GiB", "--gpu", "GPU-nope"], "no GPU matches"),
])
def test_a_refused_value_exits_2(one_gpu, args, text):
    r = tool("xpushare.cli.ctl", "--socket", one_gpu.sock, *args)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr and "Traceback" not in r.stderr
    st = json.loads(tool("xpushare.cli.ctl", "--socket", one_gpu.sock, "status", "--json").stdout)
    assert st["gpus"][0]["tq"] == 30 and st["gpus"][0]["mode"] == "serial"


def test_refusal_rule():
    for op in ("set_tq", "set_mode", "set_gpu_memory", "set_priority"):
        assert refusal_exit_code(op, "no GPU matches 'x'") == 2
        assert refusal_exit_code(op, "permission denied: uid 65534 may not change settings") == 1
    assert refusal_exit_code("status", "reply too large for one frame (9 connections)") == 1
    assert refusal_exit_code("ping", "failed") == 1


def _into_a_closed_pipe(*args):
    """Run nvsharectl with stdout a pipe whose reader is already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", *map(str, args)], env=child_env(),
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    return p


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["ping"]])
def test_closed_stdout_exits_141_without_a_traceback(one_gpu, args):
    p = _into_a_closed_pipe("--socket", one_gpu.sock, *args)
    assert p.returncode == 141, p.stderr
    assert p.stderr == ""


def test_status_into_head_is_quiet(one_gpu):
    r = subprocess.run(["bash", "-c", f"{sys.executable} -m xpushare.cli.ctl --socket {one_gpu.sock} "
                        "status | head -1"], env=child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("nvshare-scheduler ")
    assert r.stderr == ""
