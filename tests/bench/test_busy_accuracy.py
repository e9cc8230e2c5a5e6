"""bench/busy_accuracy.py: its pure parts (the scrape parser, the verdict, finding a Python with
PyTorch, the report) and its measurement against a real scheduler with --metrics-port, with a raw
protocol client standing in for the GPU workload."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import busy_accuracy as ba
import busy_workload as bw
from common import harness

FAKE = Path(__file__).resolve().parent / "fake_busy_workload.py"

SCRAPE = """\
# HELP xpushare_client_gpu_busy_seconds GPU time the client's own work took
# TYPE xpushare_client_gpu_busy_seconds counter
xpushare_client_gpu_busy_seconds_total{gpu="0",uuid="GPU-a",client="1",pid="41",namespace="",pod="",container=""} 1.5
xpushare_client_gpu_busy_seconds_total{gpu="1",uuid="GPU-b",client="1",pid="41",namespace="",pod="",container=""} 0.25
xpushare_client_gpu_busy_seconds_total{gpu="0",uuid="GPU-a",client="2",pid="4",namespace="ml",pod="p",container="c"} 7.0
xpushare_client_lock_held_seconds_total{gpu="0",uuid="GPU-a",client="3",pid="5",namespace="",pod="",container=""} 9.0
"""


def test_busy_of_sums_a_pids_series_and_ignores_others():
    assert ba.busy_of(SCRAPE, 41) == 1.75
    assert ba.busy_of(SCRAPE, 4) == 7.0
    assert ba.busy_of(SCRAPE, 5) is None  # another metric
    assert ba.busy_of(SCRAPE, 99) is None


def test_judge():
    assert ba.judge(2.0, 2.08) == {"ratio": pytest.approx(1.04), "met": True}
    assert ba.judge(2.0, 1.8)["met"] is False
    assert ba.judge(2.0, 2.2)["met"] is False
    assert ba.judge(0.0, 1.0) == {"ratio": None, "met": None}
    assert ba.judge(1.0, None) == {"ratio": None, "met": None}


def test_torch_python_takes_the_first_that_imports_torch(tmp_path):
    yes = tmp_path / "yes-python"
    yes.write_text("#!/bin/sh\nexit 0\n")
    yes.chmod(0o755)
    no = tmp_path / "no-python"
    no.write_text("#!/bin/sh\nexit 1\n")
    no.chmod(0o755)
    assert ba.torch_python([str(no), "", str(tmp_path / "missing"), str(yes)]) == str(yes)
    with pytest.raises(RuntimeError, match="no Python that imports torch"):
        ba.torch_python([str(no)])


def test_workload_arguments():
    a = bw.parse(["--pattern", "bursts", "--seconds", "3", "--warm", "w", "--go", "g",
                  "--ready", "r", "--done", "d"])
    assert (a.pattern, a.seconds, a.ready) == ("bursts", 3.0, "r")
    with pytest.raises(SystemExit):
        bw.parse(["--pattern", "nope", "--warm", "w", "--go", "g", "--ready", "r", "--done", "d"])


def test_main_rejects_bad_seconds():
    with pytest.raises(SystemExit):
        ba.main(["--seconds", "0"])


def test_report_from_a_result():
    result = {"workloads": {"saturate": {"events_s": 8.0, "exporter_s": 8.1, "bursts": 32,
                                         **ba.judge(8.0, 8.1)},
                            "bursts": {"events_s": 8.0, "exporter_s": 9.0, "bursts": 32,
                                       **ba.judge(8.0, 9.0)}},
              "scrape": SCRAPE, "top_frame": "nvshare-scheduler 0.1.0\n"}
    text = ba.section(result)
    assert "| saturate | 8.000 | 8.100 | **1.012** | 32 | yes |" in text
    assert "| bursts | 8.000 | 9.000 | **1.125** | 32 | no |" in text
    assert "nvsharectl top --once" in text and 'pid="41"' in text
    rows = ba.goals(result)
    assert len(rows) == 2 and "GPU busy time, saturate" in rows[0]
    assert "per-client GPU busy time" in ba.goals({"error": "no GPU"})[0]


@pytest.mark.parametrize("ratio", [1.0, 1.25])
def test_measure_group_against_a_real_scheduler(start_scheduler, tmp_path, ratio):
    """The exporter's busy time after the warm-up is compared with the workload's own total."""
    port = ba.free_port()
    sched = start_scheduler("off", 30.0, "--metrics-port", str(port), "--metrics-address",
                            "127.0.0.1")
    env = {**harness.native_env(), "NVSHARE_SOCK_PATH": str(sched.socket),
           "FAKE_BUSY_RATIO": str(ratio),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    keep: dict = {}
    rows = ba.measure_group(["saturate", "bursts"], sys.executable, env, sched, port, 0.5,
                            tmp_path, keep, script=FAKE)
    for name in ("saturate", "bursts"):
        row = rows[name]
        assert row["exporter_s"] == pytest.approx(0.5, abs=1e-6), row
        assert row["ratio"] == pytest.approx(ratio, rel=1e-6)
        assert row["met"] is (ratio == 1.0)
        assert "error" not in row
    assert ba.METRIC in keep["scrape"]
    assert "Busy" in keep["top"] or "failed" not in keep["top"], keep["top"]
