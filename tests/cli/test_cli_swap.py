"""What nvsharectl status and top show of swapping: per GPU its clients' resident and swapped-out
bytes and the last switch's phases, per client its resident and swapped bytes and whether it is
being reclaimed (sent EVICT, not answered yet); at every width, with nothing cut."""

import io

import pytest
from rich.console import Console

from test_cli_status_width import WIDTHS, check_fits, table_rows
from xpushare.cli.ctl_render import last_switch_cell, millis, render_status
from xpushare.cli.ctl_top import Tracker, json_frame, render_frame

GiB = 1 << 30
UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _gpu_entry(index, state, managed, resident, swapped, reclaiming=False):
    return {"device": 0, "uuid": UUID, "index": index, "state": state, "managed_bytes": managed,
            "other_bytes": 0, "gpu_busy_seconds": 0.0, "gpu_busy_ratio": None,
            "over_memory_limit": False, "resident_bytes": resident, "swapped_bytes": swapped,
            "reclaiming": reclaiming, "swap_refused": False, "swap_out_seconds": 0.12,
            "swap_in_seconds": None}


def _status():
    gpu = {"index": 0, "uuid": UUID, "name": "Fake H100", "memory_total": 80 * GiB,
           "capacity": 10 * GiB, "capacity_source": "setting", "mode": "auto",
           "operation": "exclusive", "why": "auto mode", "used": 4 * GiB, "budget": 9 * GiB,
           "tq": 30, "tq_source": "explicit", "switch_cost": None,
           "holders": [{"pid": 4101, "client_id": 2, "priority": 0, "held_for": 3.0,
                        "dropping": False, "share": 1.0, "job": "pid 4101", "reserved": False}],
           "queue": [], "blocked": [], "resident_bytes": 9 * GiB, "swapped_bytes": 5 * GiB,
           "reclaiming": [4100], "reclaims": 3,
           "last_switch": {"drain": 0.003, "swap_out": 0.12, "swap_in": None, "ago": 2.0}}
    client = {"client_id": 1, "pid": 4100, "uid": 0, "command": "python train.py",
              "priority": 0, "state": "idle", "quota": {}, "pod": None, "pod_hint": None,
              "job": None, "gpus": [_gpu_entry(0, "idle", 6 * GiB, GiB, 5 * GiB, True)]}
    holder = {**client, "client_id": 2, "pid": 4101, "state": "holding",
              "gpus": [_gpu_entry(0, "holding", 4 * GiB, 4 * GiB, 0)]}
    return {"scheduler": {"version": "0.1.0", "pid": 1, "socket": "/s"}, "gpus": [gpu],
            "clients": [client, holder], "jobs": []}


def test_phase_cells():
    assert [millis(x) for x in (0.0004, 0.003, 0.12, 1.5, 12.0)] == \
        ["0.4ms", "3.0ms", "120ms", "1500ms", "12.0s"]
    assert last_switch_cell({"last_switch": None}) == "-"
    assert last_switch_cell({"last_switch": {"drain": None, "swap_out": 0.2, "swap_in": 0.05}}) \
        == "out=200ms in=50ms"


def test_status_shows_resident_swapped_reclaiming_and_the_last_switch():
    out = io.StringIO()
    render_status(_status(), file=out, width=200)
    text = out.getvalue()
    check_fits(text, 200)
    header, rows = table_rows(text, "GPUs")
    assert {"Resident", "Swapped", "Last switch"} <= set(header), header
    row = rows[0]
    assert row[header.index("Resident")] == "9GiB" and row[header.index("Swapped")] == "5GiB"
    assert row[header.index("Last switch")] == "drain=3.0ms out=120ms"
    header, rows = table_rows(text, "Clients")
    idle, holder = rows
    assert idle[header.index("GPU")] == "0:reclaiming" and holder[header.index("GPU")] == "0:holding"
    assert (idle[header.index("Memory")], idle[header.index("Resident")],
            idle[header.index("Swapped")]) == ("6GiB", "1GiB", "5GiB")
    assert (holder[header.index("Resident")], holder[header.index("Swapped")]) == ("4GiB", "-")


@pytest.mark.parametrize("width", WIDTHS)
def test_status_with_swap_columns_fits_every_width(width):
    out = io.StringIO()
    render_status(_status(), file=out, width=width)
    check_fits(out.getvalue(), width)
    header, rows = table_rows(out.getvalue(), "Clients")
    assert [row[0] for row in rows] == ["4100", "4101"]


def test_top_shows_resident_swapped_and_the_last_switch():
    out = io.StringIO()
    console = Console(file=out, width=160)
    console.print(render_frame(_status(), Tracker(), 160, None, 0.0))
    text = out.getvalue()
    check_fits(text, 160)
    assert "holders 4GiB; resident 9GiB, swapped 5GiB" in text
    assert "last switch: drain=3.0ms, out=120ms (2s ago)" in text
    header, rows = table_rows(text, "Clients")
    assert [row[header.index("Swapped")] for row in rows] == ["-", "5GiB"]  # the holder first
    assert rows[1][header.index("GPU")] == "0:reclaiming"  # idle, after the holder
    frame = json_frame(_status())
    g = frame["gpus"][0]
    assert (g["resident_bytes"], g["swapped_bytes"], g["reclaiming"]) == (9 * GiB, 5 * GiB, [4100])
    assert g["last_switch"]["swap_out"] == 0.12
    idle = next(c for c in frame["clients"] if c["pid"] == 4100)
    assert idle["swapped_bytes"] == 5 * GiB
    assert idle["gpus"][0] == {"index": 0, "uuid": UUID, "state": "idle", "bytes": 6 * GiB,
                               "resident_bytes": GiB, "swapped_bytes": 5 * GiB,
                               "reclaiming": True}
