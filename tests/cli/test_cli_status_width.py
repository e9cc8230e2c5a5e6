"""nvsharectl status at 80 to 200 columns: whole columns are left out, values are never cut."""

import json
import re
import shutil
import subprocess
import sys

import pytest
from rich.cells import cell_len

from ctl_call import ctl_call
from live_clients import TWO_GPUS, start_clients
from sched_harness import SchedulerProcess, child_env, make_socket_dir

WIDTHS = (80, 100, 120, 200)


def ctl(sock, *args, env=None):
    """nvsharectl in this process (ctl_call), or a process of its own where env names variables."""
    if env is None:
        return ctl_call(["--socket", sock, *args])
    return subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(sock), *args],
                          env=child_env(env), capture_output=True, text=True, timeout=60)


def live_scheduler(start_scheduler):
    """A scheduler knowing two GPUs, with its three client processes (live_clients)."""
    s = start_scheduler("--mode", "serial", "--tq", "30", nvml=TWO_GPUS)
    clients = start_clients(s.sock)
    yield s, clients
    for c in clients:
        c.close()


@pytest.fixture(scope="module")
def live():
    """live_scheduler once for a module whose tests only read status (one that stops the
    scheduler takes its own): they take seconds, well within the holder's 30 s quantum."""
    d = make_socket_dir()
    procs = []

    def start(*args, nvml=None):
        procs.append(SchedulerProcess(d / "s.sock", args, nvml=nvml))
        return procs[-1].start()

    yield from live_scheduler(start)
    for p in procs:
        p.stop()
    shutil.rmtree(d, ignore_errors=True)


def table_rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The header and the body cells of the table under title in rich's default box."""
    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(title)))
    header, rows = None, []
    for line in lines[start + 1:]:
        if line.startswith("┃") and header is None:
            header = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            rows.append([c.strip() for c in line.strip("│").split("│")])
        elif line.startswith("└"):
            break
    return header, rows


def check_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{cell_len(line)} > {width}: {line!r}"
    assert not re.search(r"\d…", text), f"a number was cut:\n{text}"


@pytest.mark.parametrize("width", WIDTHS)
def test_status_keeps_whole_pids_at_every_width(live, width):
    s, clients = live
    r = ctl(s.sock, "status", "--width", str(width))
    assert r.returncode == 0, r.stderr
    check_fits(r.stdout, width)
    header, rows = table_rows(r.stdout, "Clients")
    assert header[0] == "PID", header
    assert sorted(row[0] for row in rows) == sorted(str(c.pid) for c in clients)
    assert {"PID", "State", "Priority", "Memory"} <= set(header)
    gpu_header, gpu_rows = table_rows(r.stdout, "GPUs")
    assert {"GPU", "Mode", "Holders", "Queue"} <= set(gpu_header)
    mode = gpu_rows[0][gpu_header.index("Mode")]
    assert mode == "serial: serialised"
    holders = gpu_rows[0][gpu_header.index("Holders")]
    assert holders.startswith(f"{clients[0].pid} (")


def test_status_at_200_columns_shows_every_column_and_ends_a_long_command_in_an_ellipsis(live):
    s, clients = live
    r = ctl(s.sock, "status", "--width", "200")
    header, rows = table_rows(r.stdout, "Clients")
    assert header == ["PID", "UID", "Priority", "State", "GPU", "Memory", "Resident", "Swapped",
                      "GPU time", "Wait", "Pod", "Quota", "Command"]
    assert all(row[-1].endswith("…") for row in rows)  # the command lines are longer than 60
    assert rows[0][10] == "ml/trainer-with-a-long-name-0 (hint)"
    assert rows[0][8] == "0.00s"  # these raw protocol clients report no GPU time
    assert rows[0][9].count("/") == 1 and rows[1][9] == "-"  # the holder's wait; the others wait
    assert rows[0][11] == "-"     # nor set any quota
    # The holder's memory is on the GPU; the others (no SWAP) count none while they do not hold,
    # and none of them swapped.
    assert [row[6:8] for row in rows] == [["5GiB", "-"], ["0B", "-"], ["0B", "-"]]
    gpu_header, gpu_rows = table_rows(r.stdout, "GPUs")
    assert gpu_header == ["GPU", "UUID", "Name", "Memory", "Capacity", "Resident", "Swapped",
                          "Mode", "TQ", "Last switch", "Holders", "Queue"]
    assert [row[5:7] + row[9:10] for row in gpu_rows] == [["5GiB", "-", "-"], ["0B", "-", "-"]]


def test_status_width_from_columns_when_not_a_terminal(live):
    s, _ = live
    r = ctl(s.sock, "status", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    check_fits(r.stdout, 80)
    assert "UUID" not in r.stdout  # the least important GPU column went first


def test_long_pids_and_many_holders_stay_whole(live):
    """pid_max can be 4194304: seven-digit pids, several on one GPU, still whole at 80 columns."""
    import io

    from xpushare.cli.ctl_render import render_status

    s, _ = live
    status = json.loads(ctl(s.sock, "status", "--json").stdout)
    big = {c["pid"]: 4194300 + i for i, c in enumerate(status["clients"])}
    for c in status["clients"]:
        c["pid"] = big[c["pid"]]
    g0 = status["gpus"][0]
    g0["holders"] = [{**g0["holders"][0], "pid": p, "dropping": i == 0}
                     for i, p in enumerate(big.values())]
    g0["queue"] = list(big.values())
    for width in WIDTHS:
        out = io.StringIO()
        render_status(status, file=out, width=width)
        check_fits(out.getvalue(), width)
        _, rows = table_rows(out.getvalue(), "Clients")
        assert sorted(int(row[0]) for row in rows) == sorted(big.values())
        header, gpu_rows = table_rows(out.getvalue(), "GPUs")
        # The holder and queue lists wrap between pids, never inside one.
        holders = " ".join(row[header.index("Holders")] for row in gpu_rows)
        queue = " ".join(row[header.index("Queue")] for row in gpu_rows)
        for p in big.values():
            assert re.search(rf"(?<!\d){p} \(", holders), (p, out.getvalue())
            assert re.search(rf"(?<!\d){p}(?!\d)", queue), (p, out.getvalue())


def test_bad_width_is_a_usage_error(live):
    s, _ = live
    for bad in ("0", "-5", "wide"):
        r = ctl(s.sock, "status", "--width", bad)
        assert r.returncode == 2 and "usage: nvsharectl" in r.stderr
