"""Jobs in nvsharectl status and top (status's `jobs` and each client's `job`): a Jobs table and a
Job column when there are jobs to show, neither when there are none; at every width the values stay
whole, as the other tables keep them (test_cli_status_width.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from test_cli_status_width import WIDTHS, check_fits, table_rows

from xpushare.cli.ctl_render import render_status
from xpushare.cli.ctl_top import Tracker, json_frame, render_frame

GiB = 1 << 30


def _gpu(index: int, holders=()) -> dict:
    return {"index": index, "uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
            "name": "Fake H100", "memory_total": 80 * GiB, "capacity": 80 * GiB, "mode": "serial",
            "operation": "serialised", "why": "", "used": 0, "budget": None, "tq": 30.0,
            "tq_source": "explicit", "switch_cost": None, "queue": [],
            "holders": [{"pid": p, "client_id": p, "priority": 0, "held_for": 1.0,
                         "dropping": False, "share": None, "job": "train", "reserved": False}
                        for p in holders]}


def _client(pid: int, index: int, job: str | None) -> dict:
    return {"client_id": pid, "pid": pid, "uid": 1000, "command": "python train.py",
            "priority": 0, "state": "holding", "pod": None, "pod_hint": None, "job": job,
            "quota": {"compute_limit": None, "compute_share": None, "memory_limit": None,
                      "sources": {}, "applied_by_client": False},
            "gpus": [{"device": 0, "uuid": _gpu(index)["uuid"], "index": index,
                      "state": "holding", "managed_bytes": GiB, "other_bytes": 0,
                      "gpu_busy_seconds": 0.0, "gpu_busy_ratio": None,
                      "over_memory_limit": False}]}


def status(with_job: bool) -> dict:
    """Two ranks of one job on two GPUs and a process alone, or the same three without the job."""
    job = "train" if with_job else None
    clients = [_client(4194301, 0, job), _client(4194302, 1, job), _client(4194303, 0, None)]
    jobs = [{"job": "train", "kind": "name", "state": "running", "formed": True, "size": None,
             "members": [4194301, 4194302], "gpus": [0, 1]},
            {"job": "torchrun run-7", "kind": "torchrun", "state": "idle", "formed": False,
             "size": 4, "members": [4194304], "gpus": []}]
    return {"scheduler": {"version": "0.1.0", "pid": 1, "socket": "/tmp/s"},
            "gpus": [_gpu(0, [4194301]), _gpu(1, [4194302])], "clients": clients,
            "jobs": jobs if with_job else []}


def rendered(st: dict, width: int) -> str:
    out = io.StringIO()
    render_status(st, file=out, width=width)
    return out.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_status_shows_a_jobs_table_and_a_job_column(width):
    text = rendered(status(True), width)
    check_fits(text, width)
    header, rows = table_rows(text, "Jobs")
    assert header[0] == "Job" and {"State", "Members"} <= set(header), header
    cells = [dict(zip(header, r)) for r in rows]
    assert [c["Job"] for c in cells] == ["train", "torchrun run-7"]
    assert [c["Members"] for c in cells] == ["2", "1/4 forming"]
    assert [c["State"] for c in cells] == ["running", "idle"]
    if "PIDs" in header:  # pids are whole or the column is gone
        assert cells[0]["PIDs"].split() == ["4194301", "4194302"]
    if width >= 120:
        assert cells[0]["GPUs"] == "0 1" and cells[1]["GPUs"] == "-"
        assert cells[1]["Kind"] == "torchrun"
    header, rows = table_rows(text, "Clients")
    if width >= 100:
        jobs = {r[0]: r[header.index("Job")] for r in rows}
        assert jobs == {"4194301": "train", "4194302": "train", "4194303": "-"}


def test_status_at_200_columns_has_every_job_column():
    text = rendered(status(True), 200)
    assert table_rows(text, "Jobs")[0] == ["Job", "Kind", "State", "Members", "PIDs", "GPUs"]
    assert table_rows(text, "Clients")[0] == ["PID", "UID", "Priority", "State", "Job", "GPU",
                                              "Memory", "Resident", "Swapped", "GPU time", "Wait",
                                              "Pod", "Quota", "Command"]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_jobs_no_table_and_no_column(width):
    text = rendered(status(False), width)
    check_fits(text, width)
    assert "Jobs" not in text
    assert "Job" not in table_rows(text, "Clients")[0]


def _top(st: dict, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width).print(render_frame(st, Tracker(), width, None, 0.0))
    return out.getvalue()


def test_top_has_a_job_column_only_with_jobs():
    text = _top(status(True), 200)
    header, rows = table_rows(text, "Clients")
    assert "Job" in header, header
    assert {r[0]: r[header.index("Job")] for r in rows} == \
        {"4194301": "train", "4194302": "train", "4194303": "-"}
    assert "Job" not in table_rows(_top(status(False), 200), "Clients")[0]
    for width in WIDTHS:
        check_fits(_top(status(True), width), width)


def test_top_json_has_the_jobs():
    frame = json_frame(status(True))
    assert [j["job"] for j in frame["jobs"]] == ["train", "torchrun run-7"]
    assert frame["jobs"][0]["members"] == [4194301, 4194302]
    assert {c["pid"]: c["job"] for c in frame["clients"]} == \
        {4194301: "train", 4194302: "train", 4194303: None}
    assert json_frame(status(False))["jobs"] == []
