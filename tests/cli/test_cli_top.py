"""nvsharectl top: one frame (--once, --json) against a live scheduler, its flags and exit codes."""

import json
import os
import subprocess
import sys

import pytest
from rich.cells import cell_len

from sched_harness import child_env, registered, uuid
from test_cli_status_width import check_fits, ctl, live, live_scheduler, table_rows  # noqa: F401 (live: a fixture)


@pytest.mark.parametrize("width", [80, 100, 200])
def test_once_shows_every_gpu_and_client(live, width):
    s, clients = live
    r = ctl(s.sock, "top", "--once", "--width", str(width))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    check_fits(out, width)
    for text in ("GPU 0", "GPU 1", "serial: serialised", "serial: idle", "TQ 30s", "switch —",
                 "clients 9GiB of 80GiB", "why: serial mode: one client at a time, 1 waiting",
                 "3 clients: 1 holding, 1 waiting, 1 idle"):
        assert text in out, f"{text!r} missing from:\n{out}"
    header, rows = table_rows(out, "Clients")
    assert header[:4] == ["Client", "Priority", "State", "GPU"] or header[0] == "Client", header
    assert [row[0] for row in rows] == [str(c.pid) for c in clients]  # holder, waiter, idle
    assert [row[header.index("State")] for row in rows] == ["holding", "waiting", "idle"]
    assert {"Client", "State", "Priority", "Memory"} <= set(header)
    if width == 200:
        assert header == ["Client", "Priority", "State", "GPU", "Memory", "Swapped", "Held",
                          "Wait", "Grants", "Busy", "Quota"]
        assert [row[header.index("Swapped")] for row in rows] == ["-"] * 3  # nobody swapped
        assert [row[header.index("Quota")] for row in rows] == ["-"] * 3  # none set
        assert uuid(0) in out
        assert [row[header.index("Grants")] for row in rows] == ["—"] * 3  # one frame: unknown
        # two samples --interval apart; these raw protocol clients report no GPU time
        assert [row[header.index("Busy")] for row in rows] == ["0%"] * 3


def test_once_names_a_client_by_its_pod_when_the_scheduler_knows_it():
    """Only a pod the scheduler found (not a client's hint) names a client; its pid stays shown."""
    import io

    from rich.console import Console

    from xpushare.cli.ctl_top import Tracker, render_frame

    status = {"scheduler": {"version": "0.1.0", "pid": 1}, "gpus": [], "clients": [
        {"client_id": 1, "pid": 4194303, "uid": 0, "priority": 5, "state": "idle", "gpus": [],
         "pod": {"namespace": "ml", "name": "trainer-0"}, "pod_hint": None, "command": "x"}]}
    out = io.StringIO()
    console = Console(file=out, width=80)
    console.print(render_frame(status, Tracker(), 80, None, 0.0))
    header, rows = table_rows(out.getvalue(), "Clients")
    assert rows[0][:3] == ["ml/trainer-0", "4194303", "5"], out.getvalue()


def test_json_frame(live):
    s, clients = live
    r = ctl(s.sock, "top", "--json")
    assert r.returncode == 0, r.stderr
    frame = json.loads(r.stdout)
    assert frame["scheduler"]["pid"] == s.proc.pid
    assert frame["not_reported"] == ["lock_wait", "grants"]
    g0, g1 = frame["gpus"]
    assert (g0["index"], g0["uuid"], g0["mode"], g0["operation"], g0["tq"]) == \
        (0, uuid(0), "serial", "serialised", 30)
    assert g0["holders"] == [clients[0].pid] and g0["queue"] == [clients[1].pid]
    assert g0["clients_bytes"] == 9 << 30 and g0["capacity"] == 80 << 30 and g1["clients_bytes"] == 0
    assert "why" in g0 and "switch_cost" in g0 and "holders_bytes" in g0
    got = [(c["pid"], c["state"], c["memory_bytes"] >> 30, c["grants"], c["busy_share"])
           for c in frame["clients"]]
    assert got == [(clients[0].pid, "holding", 5, None, 0.0), (clients[1].pid, "waiting", 3, None, 0.0),
                   (clients[2].pid, "idle", 1, None, 0.0)]
    assert [c["gpu_busy_seconds"] for c in frame["clients"]] == [0.0] * 3
    assert frame["clients"][0]["held_for"] >= 0 and frame["clients"][1]["held_for"] is None


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan", "inf", "0.01", "5000"])
def test_bad_interval_is_a_usage_error(untouched_scheduler, bad):
    r = ctl(untouched_scheduler.sock, "top", "--once", "--interval", bad)
    assert r.returncode == 2, r.stderr
    assert "usage: nvsharectl" in r.stderr and "invalid interval" in r.stderr


@pytest.mark.parametrize("args", [["top", "--once", "--json"], ["top", "--width", "0"],
                                  ["top", "--height", "x"]])
def test_bad_flags_are_usage_errors(untouched_scheduler, args):
    r = ctl(untouched_scheduler.sock, *args)
    assert r.returncode == 2 and "usage: nvsharectl" in r.stderr


@pytest.mark.parametrize("args", [["top", "--once"], ["top", "--json"], ["top"]])
def test_no_scheduler_exits_1_with_a_clear_message(sockdir, args):
    r = ctl(sockdir / "none.sock", *args)
    assert r.returncode == 1 and "no scheduler is running" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("args", [["top", "--once"], ["top", "--json"]])
def test_closed_stdout_exits_141_quietly(live, args):
    s, _ = live
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(s.sock), *args],
                           env=child_env(), stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == ""


def test_as_many_clients_as_one_status_reply_holds_fit_the_height(scheduler):
    """About 380 clients with one GPU each fill the scheduler's one-frame status reply today."""
    clients = [registered(scheduler.sock) for _ in range(350)]
    try:
        clients[0].request()  # the holder, then 9 waiters, sort first
        for c in clients[1:10]:
            c.request()
        r = ctl(scheduler.sock, "top", "--once", "--width", "100", "--height", "40")
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.splitlines()) <= 40, r.stdout
        check_fits(r.stdout, 100)
        header, rows = table_rows(r.stdout, "Clients")
        states = [row[header.index("State")] for row in rows]
        assert states[:10] == ["holding"] + ["waiting"] * 9 and set(states[10:]) == {"idle"}
        assert f"+{350 - len(rows)} more" in r.stdout and len(rows) > 20
        assert "350 clients: 1 holding, 9 waiting, 340 idle" in r.stdout
        assert len(json.loads(ctl(scheduler.sock, "top", "--json").stdout)["clients"]) == 350
    finally:
        for c in clients:
            c.close()


def _many(n: int) -> dict:
    gpu = {"index": 0, "uuid": uuid(0), "name": "H100", "memory_total": 80 << 30,
           "capacity": 80 << 30, "mode": "auto", "operation": "serialised", "why": "too big",
           "used": 1 << 30, "tq": 5, "tq_source": "dynamic", "switch_cost": 0.25,
           "holders": [{"pid": 100000, "client_id": 0, "held_for": 1.5, "dropping": False}],
           "queue": list(range(100001, 100000 + n))}
    clients = [{"client_id": i, "pid": 100000 + i, "uid": 1000, "priority": i % 3,
                "state": "holding" if i == 0 else "waiting" if i < 50 else "idle",
                "gpus": [{"device": 0, "uuid": uuid(0), "index": 0, "state": "idle",
                          "managed_bytes": 1 << 30, "other_bytes": 0}],
                "pod": None, "pod_hint": None, "command": "python train.py"} for i in range(n)]
    return {"scheduler": {"version": "0.1.0", "pid": 1}, "gpus": [gpu], "clients": clients}


def test_a_thousand_clients_render_the_rows_that_fit_quickly():
    """A status of 1000 clients (more than the scheduler's reply holds today, less than it may
    later): the frame has the rows that fit, highest priority first within each state."""
    import io
    import time

    from rich.console import Console

    from xpushare.cli.ctl_top import Tracker, render_frame

    status = _many(1000)
    started = time.perf_counter()
    out = io.StringIO()
    Console(file=out, width=80).print(render_frame(status, Tracker(), 80, 50, 0.0))
    assert time.perf_counter() - started < 1.0
    text = out.getvalue()
    assert len(text.splitlines()) <= 50, text
    header, rows = table_rows(text, "Clients")
    assert rows[0][:3] == ["100000", "0", "holding"]
    prios = [int(r[1]) for r in rows[1:]]
    assert prios == sorted(prios, reverse=True)  # waiters, higher priority first
    assert f"+{1000 - len(rows)} more" in text and "1000 clients: 1 holding, 49 waiting" in text
    assert "TQ 5s auto  switch 250 ms" in text


def test_a_refused_status_is_shown_in_the_live_view():
    from xpushare.cli.ctl_top import _next_frame

    class Refusing:
        def request(self, op):
            return {"ok": False, "error": "reply too large for one frame (1001 connections)"}

    frame = _next_frame(Refusing(), None, None, None)
    assert "refused status: reply too large for one frame (1001 connections)" in frame.plain


def test_tracker_counts_grants_and_waits_between_frames():
    from xpushare.cli.ctl_top import Tracker

    def status(state, held_for=None):
        holders = [] if held_for is None else [{"client_id": 7, "pid": 70, "held_for": held_for}]
        return {"gpus": [{"holders": holders}], "clients": [{"client_id": 7, "state": state}]}

    t = Tracker()
    t.update(status("waiting"), 100.0)
    assert (t.grants_of(7), t.wait_of(7, 105.0)) == ("—", "—")  # first frame: no history
    t.update(status("waiting"), 102.0)
    assert (t.grants_of(7), t.wait_of(7, 105.0)) == ("0", "—")  # waiting since before top began
    t.update(status("holding", 1.0), 104.0)
    t.update(status("holding", 3.0), 106.0)  # the same grant, held longer
    assert t.grants_of(7) == "1"
    t.update(status("holding", 0.5), 108.0)  # held for less: a fresh grant between the frames
    t.update(status("waiting"), 110.0)
    assert (t.grants_of(7), t.wait_of(7, 113.0)) == ("2", "3s")


def test_busy_share_between_frames():
    """Busy: GPU busy seconds gained over the wall time between two frames, per client, summed over
    its GPUs; "—" before the second frame or where the scheduler reports none."""
    import io

    from rich.console import Console

    from xpushare.cli.ctl_top import Tracker, json_frame, render_frame

    def status(a_busy, b_busy):
        def gpu(i, busy):
            return {"device": i, "uuid": uuid(i), "index": i, "state": "holding",
                    "managed_bytes": 0, "other_bytes": 0, "gpu_busy_seconds": busy}
        return {"scheduler": {"version": "0.1.0", "pid": 1}, "gpus": [], "clients": [
            {"client_id": 1, "pid": 11, "uid": 0, "priority": 0, "state": "holding",
             "gpus": [gpu(0, a_busy)], "pod": None, "command": "a"},
            {"client_id": 2, "pid": 22, "uid": 0, "priority": 0, "state": "holding",
             "gpus": [gpu(0, b_busy / 2), gpu(1, b_busy / 2)], "pod": None, "command": "b"},
            {"client_id": 3, "pid": 33, "uid": 0, "priority": 0, "state": "idle",
             "gpus": [{"device": 0, "uuid": uuid(0), "index": 0, "state": "idle",
                       "managed_bytes": 0, "other_bytes": 0}], "pod": None, "command": "old"}]}

    def busy_column(tracker, st):
        out = io.StringIO()
        Console(file=out, width=200).print(render_frame(st, tracker, 200, None, 0.0))
        header, rows = table_rows(out.getvalue(), "Clients")
        return {row[0]: row[header.index("Busy")] for row in rows}

    t = Tracker()
    t.update(status(10.0, 4.0), 100.0)
    assert busy_column(t, status(10.0, 4.0)) == {"11": "—", "22": "—", "33": "—"}
    t.update(status(11.5, 7.0), 102.0)
    assert busy_column(t, status(11.5, 7.0)) == {"11": "75%", "22": "150%", "33": "—"}
    frame = json_frame(status(11.5, 7.0), t)
    assert [c["busy_share"] for c in frame["clients"]] == [0.75, 1.5, None]
    assert [c["gpu_busy_seconds"] for c in frame["clients"]] == [11.5, 7.0, 0.0]
    t.update(status(11.0, 7.0), 104.0)  # never below zero
    assert t.busy_share[1] == 0.0


def test_memory_bar():
    from xpushare.cli.ctl_top import memory_bar

    assert memory_bar(5, 8, 10, 10) == "[█████▒▒▒··]"
    assert memory_bar(5, 30, 10, 10) == "[█████▒▒▒▒▒]"  # more than the capacity: full, never longer
    assert memory_bar(0, 0, None, 4) == "[????]"
    assert cell_len(memory_bar(7, 7, 3, 12)) == 14


@pytest.fixture
def own_live(start_scheduler):
    """live's scheduler and clients for a test that stops the scheduler."""
    yield from live_scheduler(start_scheduler)


def test_live_view_into_a_pipe_writes_frames_and_exits_1_when_the_scheduler_goes(own_live):
    """Without a terminal the frames follow one another (as top -b writes them); the scheduler
    going away ends the view as it ends any nvsharectl command: a message and exit 1."""
    import time

    s, _ = own_live
    p = subprocess.Popen([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(s.sock), "top",
                          "--interval", "0.2", "--width", "100"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True)
    try:
        deadline = time.monotonic() + 20
        frames = 0
        while frames < 2 and time.monotonic() < deadline:
            frames += "clients:" in p.stdout.readline()
        assert frames == 2
        s.stop()
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    assert err.startswith("nvsharectl: ") and "Traceback" not in err
