"""nvsharectl against a live scheduler."""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from ctl_call import ctl_call
from sched_harness import GiB, as_user, child_env, registered, uuid
from xpushare import __version__
# Imported here, not in the child as_user forks: another uid may not be able to read the
# interpreter's own modules (rich imports pickle).
from xpushare.cli import ctl as ctl_mod
from xpushare.wire.protocol import MessageType


def ctl(*args, sock=None, env=None):
    """nvsharectl ARGS: its main() in this process (ctl_call), or a process of its own when env
    names variables for it."""
    argv = [*(["--socket", str(sock)] if sock else []), *args]
    if env is None:
        return ctl_call(argv)
    return subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", *argv], env=child_env(env),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def busy(start_scheduler):
    """A scheduler knowing two GPUs (fake NVML), with a holder and a waiter on GPU 0."""
    s = start_scheduler("--mode", "serial", "--tq", "30", nvml=[{"uuid": uuid(0), "name": "Fake H100", "memory": 80 * GiB},
                                            {"uuid": uuid(1), "name": "Fake H100", "memory": 80 * GiB}])
    holder = registered(s.sock, pod_name="trainer-0", pod_namespace="ml")
    holder.mem_update(0, 5 * GiB, 0)
    holder.request()
    holder.expect(MessageType.LOCK_OK)
    waiter = registered(s.sock)
    waiter.request()
    yield s, holder, waiter
    holder.close()
    waiter.close()


def test_status_json(busy):
    s, holder, waiter = busy
    r = ctl("status", "--json", sock=s.sock)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["ok"] and st["scheduler"]["pid"] == s.proc.pid
    g0, g1 = st["gpus"]
    assert (g0["index"], g0["uuid"], g0["name"], g0["memory_total"], g0["mode"], g0["tq"]) == \
        (0, uuid(0), "Fake H100", 80 * GiB, "serial", 30)
    assert [h["pid"] for h in g0["holders"]] == [os.getpid()] and g0["queue"] == [os.getpid()]
    assert g1["holders"] == [] and g1["queue"] == []
    states = sorted(c["state"] for c in st["clients"])
    assert states == ["holding", "waiting"]
    mem = {c["state"]: c["gpus"][0]["managed_bytes"] for c in st["clients"]}
    assert mem == {"holding": 5 * GiB, "waiting": 0}


def test_status_text(busy):
    s, _, _ = busy
    r = ctl("status", "--width", "200", sock=s.sock)  # every column (a pipe gets 80 by default)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for text in ("GPUs", "Clients", uuid(0), uuid(1), "Fake H100", "80GiB", "serial", "30s",
                 "holding", "waiting", "5GiB", "ml/trainer-0 (hint)", f"nvshare-scheduler 0.1.0 (pid {s.proc.pid})"):
        assert text in out, f"{text!r} missing from:\n{out}"
    row = next(line for line in out.splitlines() if uuid(0) in line)
    assert f"{os.getpid()} (" in row  # holder pid and how long
    assert "pytest" in out or "python" in out  # the client's command line


def test_status_with_nothing_known(scheduler):
    r = ctl("status", sock=scheduler.sock)
    assert r.returncode == 0
    assert "No GPUs known yet." in r.stdout and "No clients." in r.stdout


def test_set_tq_and_anti_thrash_show_in_status(busy):
    s, holder, waiter = busy
    assert ctl("-T", "7", sock=s.sock).returncode == 0
    assert ctl("--anti-thrash", "off", "--gpu", "1", sock=s.sock).returncode == 0
    st = json.loads(ctl("status", "--json", sock=s.sock).stdout)
    assert [(g["tq"], g["mode"]) for g in st["gpus"]] == [(7, "serial"), (7, "off")]
    # anti-thrash off on GPU 0 lets the waiter run at once.
    assert ctl("-S", "off", "--gpu", uuid(0), sock=s.sock).returncode == 0
    assert waiter.expect(MessageType.LOCK_OK).quantum_ms == 0
    assert ctl("-S", "on", sock=s.sock).returncode == 0
    st = json.loads(ctl("status", "--json", sock=s.sock).stdout)
    assert [g["mode"] for g in st["gpus"]] == ["serial", "serial"]
    assert waiter.expect(MessageType.DROP_LOCK).reason == 3  # administrative


def test_mode_and_dynamic_quantum_show_in_status(busy):
    s, holder, waiter = busy
    assert ctl("--mode", "auto", "--gpu", "0", sock=s.sock).returncode == 0
    # Both fit in 80 GiB: in auto mode the waiter runs beside the holder at once.
    assert waiter.expect(MessageType.LOCK_OK).quantum_ms == 30_000
    assert ctl("-T", "auto", sock=s.sock).returncode == 0
    st = json.loads(ctl("status", "--json", sock=s.sock).stdout)
    g0 = st["gpus"][0]
    assert (g0["mode"], g0["operation"], g0["tq_source"], g0["tq"]) == ("auto", "concurrent", "dynamic", 5)
    assert st["scheduler"]["tq"] == "auto"
    out = ctl("status", sock=s.sock).stdout
    assert "auto: concurrent" in out and "5s auto" in out, out


def test_set_priority_by_pid_shows_in_status(busy):
    s, holder, waiter = busy
    r = ctl("--set-priority", "7", "--pid", str(os.getpid()), sock=s.sock)
    assert r.returncode == 0, r.stderr
    st = json.loads(ctl("status", "--json", sock=s.sock).stdout)
    assert sorted(c["priority"] for c in st["clients"]) == [7, 7]  # both connections are this pid
    assert st["gpus"][0]["holders"][0]["priority"] == 7
    r = ctl("--set-priority", "1", "--pid", "999999999", sock=s.sock)
    assert r.returncode == 2 and "no client with pid 999999999" in r.stderr


def test_quota_flags_reach_the_clients_and_show_in_status(busy):
    s, holder, waiter = busy
    me = str(os.getpid())
    for flags in (["--set-compute-limit", "40%", "--pid", me],
                  ["--set-compute-share", "2.5", "--pid", me],
                  ["--set-memory-limit", "4GiB", "--pid", me]):
        r = ctl(*flags, sock=s.sock)
        assert r.returncode == 0, (flags, r.stderr)
    quotas = [c["quota"] for c in json.loads(ctl("status", "--json", sock=s.sock).stdout)["clients"]]
    assert [(q["compute_limit"], q["compute_share"], q["memory_limit"]) for q in quotas] == \
        [(40, 2.5, 4 * GiB)] * 2
    assert ctl("--set-compute-limit", "none", "--pid", me, sock=s.sock).returncode == 0
    quotas = [c["quota"] for c in json.loads(ctl("status", "--json", sock=s.sock).stdout)["clients"]]
    assert {q["compute_limit"] for q in quotas} == {None}
    r = ctl("--set-memory-limit", "1GiB", "--pod", "ns/nobody", sock=s.sock)
    assert r.returncode == 0, r.stderr   # a pod's later clients get it: no client yet is fine


def test_set_gpu_memory(busy):
    s, holder, _ = busy
    assert ctl("--set-gpu-memory", "16GiB", "--gpu", "0", sock=s.sock).returncode == 0
    st = json.loads(ctl("status", "--json", sock=s.sock).stdout)
    assert [g["capacity"] for g in st["gpus"]] == [16 * GiB, 80 * GiB]
    assert holder.attach(0, uuid(0)).capacity == 16 * GiB


def test_socket_from_environment(busy):
    s, _, _ = busy
    r = ctl("status", "--json", env={"NVSHARE_SOCK_PATH": str(s.sock)})
    assert r.returncode == 0 and json.loads(r.stdout)["ok"]


def test_no_scheduler_exits_1_with_a_clear_message(sockdir):
    r = ctl("status", sock=sockdir / "none.sock")
    assert r.returncode == 1
    assert "no scheduler is running" in r.stderr and str(sockdir / "none.sock") in r.stderr
    assert r.stdout == ""


def test_ping(busy):
    s, _, _ = busy
    r = ctl("ping", sock=s.sock)
    assert r.returncode == 0, r.stderr
    assert f"nvshare-scheduler {__version__} answers on {s.sock}" in r.stdout


def test_ping_without_a_scheduler_exits_1(sockdir):
    r = ctl("ping", sock=sockdir / "none.sock")
    assert r.returncode == 1 and "no scheduler is running" in r.stderr and r.stdout == ""


def test_ping_answers_where_status_is_too_large(scheduler):
    """The health probe must not depend on how many clients are connected."""
    clients = [registered(scheduler.sock) for _ in range(300)]
    try:
        r = ctl("ping", sock=scheduler.sock)
        assert r.returncode == 0, r.stderr
    finally:
        for c in clients:
            c.close()


def test_set_tq_to_the_largest_quantum(busy):
    s, holder, waiter = busy
    assert ctl("-T", "4294967", sock=s.sock).returncode == 0
    holder.release()
    assert waiter.expect(MessageType.LOCK_OK).quantum_ms == 4_294_967_000


@pytest.mark.parametrize("args", [["-T", "0"], ["-T", "-3"], ["-T", "abc"], ["-T", "1.5"],
                                  ["-T", "4294968"], ["-T", "5000000"],
                                  ["-S", "maybe"], ["--set-gpu-memory", "lots", "--gpu", "0"],
                                  ["--set-gpu-memory", "1GiB"], ["--gpu", "0"], ["frobnicate"],
                                  ["--mode", "fast"], ["--mode", "auto", "-S", "on"],
                                  ["--set-priority", "5"], ["--pid", "7"],
                                  ["--set-priority", "x", "--pid", "7"],
                                  ["--set-priority", "1001", "--pid", "7"],
                                  ["--set-priority", "1", "--pid", "0"],
                                  ["--set-priority", "1", "--pid", "7", "--client", "3"],
                                  ["--set-compute-limit", "0", "--pid", "7"],
                                  ["--set-compute-limit", "101", "--pid", "7"],
                                  ["--set-compute-limit", "half", "--pid", "7"],
                                  ["--set-compute-share", "0", "--pid", "7"],
                                  ["--set-memory-limit", "0", "--pid", "7"],
                                  ["--set-memory-limit", "1GiB"],
                                  ["--set-compute-share", "2", "--pod", "web"],
                                  ["--set-priority", "2", "--pod", "ns/web"]])
def test_bad_values_exit_2_with_usage(untouched_scheduler, args):
    scheduler = untouched_scheduler
    r = ctl(*args, sock=scheduler.sock)
    assert r.returncode == 2, (args, r.stderr)
    assert "usage: nvsharectl" in r.stderr
    assert json.loads(ctl("status", "--json", sock=scheduler.sock).stdout)["scheduler"]["tq"] == 30


def test_scheduler_refusal_of_a_value_exits_2(busy):
    s, _, _ = busy
    r = ctl("-T", "5", "--gpu", "GPU-nope", sock=s.sock)
    assert r.returncode == 2 and "no GPU matches" in r.stderr


def test_no_arguments_prints_help():
    r = ctl(env={})  # a process: the help's width is a pipe's
    assert r.returncode == 0
    for flag in ("-T N|auto, --set-tq N|auto", "-S {on,off}, --anti-thrash {on,off}",
                 "--mode {auto,serial,off}", "--set-priority N", "status"):
        assert flag in r.stdout


def _ctl_in_process(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = ctl_mod.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_permission_denied_for_another_user(busy):
    s, _, _ = busy
    rc, out, err = as_user(65534, 65534, _ctl_in_process, "--socket", str(s.sock), "-T", "3")
    assert rc == 1 and "permission denied" in err
    rc, out, err = as_user(65534, 65534, _ctl_in_process, "--socket", str(s.sock), "status", "--json")
    assert rc == 0 and json.loads(out)["gpus"][0]["tq"] == 30


def test_each_setting_says_what_it_changed(busy):
    s, _, _ = busy
    r = ctl("-T", "7", sock=s.sock)
    assert (r.returncode, r.stdout) == (0, "nvsharectl: time quantum of every GPU: 7 s\n"), r.stderr
    r = ctl("-S", "on", "--gpu", "1", sock=s.sock)
    assert r.stdout == "nvsharectl: mode of GPU 1: serial\n"
    r = ctl("-T", "auto", "--set-gpu-memory", "12GiB", "--gpu", "0", sock=s.sock)
    assert r.stdout.splitlines() == ["nvsharectl: time quantum of GPU 0: dynamic",
                                     "nvsharectl: capacity of GPU 0: 12GiB"]
    r = ctl("--set-priority", "7", "--pid", str(os.getpid()), sock=s.sock)
    assert r.stdout == f"nvsharectl: priority of pid {os.getpid()}: 7 (2 connection(s))\n"
    r = ctl("--set-compute-limit", "25", "--pid", str(os.getpid()), sock=s.sock)
    assert r.stdout == f"nvsharectl: compute limit of pid {os.getpid()}: 25% (2 connection(s))\n"


def test_a_connection_the_scheduler_closed_is_not_a_closed_stdout(monkeypatch):
    """An EPIPE on the socket (a scheduler that closed the connection) is a failure with a message,
    exit 1; only stdout's own closed pipe is 141 with nothing said."""
    from xpushare.cli import ctl as ctl_mod

    class Closed:
        path = "/nowhere"

        def request(self, op, **fields):
            raise BrokenPipeError(32, "Broken pipe")

    @contextlib.contextmanager
    def closed(_path):
        yield Closed()

    monkeypatch.setattr(ctl_mod, "connect_ctl", closed)
    rc, out, err = _ctl_in_process("ping")
    assert (rc, out) == (1, "") and "ping: the scheduler closed the connection" in err
