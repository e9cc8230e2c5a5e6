"""nvsharectl top and status on small terminals and in pipes: a frame fits its height with the
legend and "+K more" kept; the TQ cell is never wrapped; a pipe gets 80 columns; GPUs NVML did not
report are told apart by their UUIDs (tools/readme_samples.py's fixed node, rendered here)."""

import copy
import subprocess
import sys

import pytest
from rich.cells import cell_len

from sched_harness import child_env
from tools import readme_samples
from xpushare.cli.ctl_render import label_gpus
from xpushare.scheduler.control.ops import select_gpus  # noqa: F401 (the prefix rule --gpu uses)

LEGEND_START = "—: not known yet"


def six_clients() -> dict:
    node = readme_samples.node()
    for i in range(2):
        extra = copy.deepcopy(node["clients"][2])
        extra["pid"], extra["client_id"] = 4105 + i, 5 + i
        node["clients"].append(extra)
    return node


@pytest.mark.parametrize("width,height", [(50, 14), (50, 10), (80, 14), (80, 24), (120, 20)])
def test_a_frame_fits_its_height_and_keeps_the_legend_and_the_count(width, height):
    out = readme_samples.frame(width, height, six_clients())
    lines = out.splitlines()
    assert len(lines) <= height, out
    assert all(cell_len(line) <= width for line in lines), out
    assert lines[-1].startswith(LEGEND_START) or lines[-2].startswith(LEGEND_START), out
    rows = [line for line in lines if line.startswith("│ 41")]
    more = [line for line in lines if line.startswith("+") and line.endswith(" more")]
    shown = len(rows)
    assert shown >= 1
    if shown < 6:
        assert more == [f"+{6 - shown} more"], out
    else:
        assert more == []


def test_at_50_by_14_the_gpus_give_way_before_the_clients():
    out = readme_samples.frame(50, 14, six_clients())
    assert len([line for line in out.splitlines() if line.startswith("│ 41")]) >= 3, out


def test_a_tall_frame_shows_everything():
    out = readme_samples.frame(80, 60, six_clients())
    assert "why: auto mode: 2 clients fit together" in out and "+" not in out.split("Clients")[1]


def test_the_tq_cell_is_never_wrapped():
    node = readme_samples.node()
    for width in (80, 100, 200):
        out = readme_samples.status(width, copy.deepcopy(node))
        tq = [line for line in out.splitlines() if "3.8s" in line]
        assert len(tq) == 1 and "3.8s auto" in tq[0], out
    wide = readme_samples.status(200, copy.deepcopy(node))
    assert "Switch" in wide and "200ms" in wide  # the measured switch cost: a column of its own


def test_a_pipe_gets_80_columns(start_scheduler):
    s = start_scheduler("--no-nvml")
    r = subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(s.sock), "status"],
                       env=child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert max(cell_len(line) for line in r.stdout.splitlines()) <= 80


def test_gpus_without_an_index_are_told_apart_by_their_uuids():
    node = readme_samples.node()
    node["gpus"][1]["uuid"] = node["gpus"][0]["uuid"][:14] + "ff-0000-0000-000000000000"
    for g in node["gpus"]:
        g["index"] = None
    for c in node["clients"]:
        for d in c["gpus"]:
            d["uuid"], d["index"] = node["gpus"][d["index"]]["uuid"], None
    label_gpus(node)
    first, second = (g["label"] for g in node["gpus"])
    assert first != second and node["gpus"][0]["uuid"].startswith(first)
    assert len(first) == 15 and first == "GPU-5f3c9e2a-7d"  # the first character where they differ
    assert {d["label"] for c in node["clients"] for d in c["gpus"]} == {first, second}
    unique = readme_samples.node()
    for g in unique["gpus"]:
        g["index"] = None
    label_gpus(unique)
    assert [g["label"] for g in unique["gpus"]] == ["GPU-5f3c9e2a", "GPU-0b8d6a1f"]


def test_status_without_nvml_names_each_gpu():
    """Rendered: the GPU column and the explanation lines name the GPUs by UUID prefix, not '-'."""
    node = readme_samples.node()
    for g in node["gpus"]:
        g["index"] = None
    for c in node["clients"]:
        for d in c["gpus"]:
            d["index"] = None
    out = readme_samples.status(80, node)
    gpu_table = out.split("Clients")[0]
    assert "│ GPU-5f3c9e2a │" in gpu_table and "│ GPU-0b8d6a1f │" in gpu_table, out
    assert "GPU -" not in out and "│ -  " not in gpu_table.split("┡")[1].split("\n")[1]
    assert "GPU-5f3c9e2a: auto mode" in out and "GPU-0b8d6a1f:idle" in out, out
