"""bench/observability/busy_accuracy.py: its pure parts (the scrape parser, the verdict, finding a Python with
PyTorch, the report) and its measurement against a real scheduler with --metrics-port, with a raw
protocol client standing in for the GPU workload."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.observability import busy_accuracy as ba
from bench.observability import busy_workload as bw
from bench.core import common
from bench.core.common import harness

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


def test_true_time_is_kernels_times_the_native_time_of_their_kind():
    ref = {"add_ms": 0.25, "tiny_ms": 0.002}
    assert ba.true_seconds({"kind": "add", "kernels": 4000}, ref) == pytest.approx(1.0)
    assert ba.true_seconds({"kind": "tiny", "kernels": 1000}, ref) == pytest.approx(0.002)
    assert ba.true_seconds({"kind": "other", "kernels": 1}, ref) is None
    assert ba.true_seconds({"kind": "add"}, ref) is None


def test_overclaims_are_counted_from_the_log():
    log = ("x INFO grant pid=1\n"
           "y WARNING pid=2 gpu=0 claimed 1.675s of GPU busy time, more than the wall time since its"
           " last report; cut to it (1 such report(s) so far)\n")
    assert ba.overclaims(log) == 1 and ba.overclaims("") == 0


def test_torch_python_takes_the_first_that_imports_torch(tmp_path):
    yes = tmp_path / "yes-python"
    yes.write_text("#!/bin/sh\nexit 0\n")
    yes.chmod(0o755)
    no = tmp_path / "no-python"
    no.write_text("#!/bin/sh\nexit 1\n")
    no.chmod(0o755)
    assert common.torch_python([str(no), "", str(tmp_path / "missing"), str(yes)]) == str(yes)
    with pytest.raises(RuntimeError, match="no Python that imports torch"):
        common.torch_python([str(no)])


def test_workload_arguments():
    a = bw.parse(["--pattern", "burst8", "--seconds", "3", "--warm", "w", "--go", "g",
                  "--ready", "r", "--done", "d"])
    assert (a.pattern, a.seconds, a.ready) == ("burst8", 3.0, "r")
    assert bw.parse(["--reference"]).reference
    for bad in (["--pattern", "nope", "--warm", "w", "--go", "g", "--ready", "r", "--done", "d"],
                ["--pattern", "tiny"]):
        with pytest.raises(SystemExit):
            bw.parse(bad)


def test_main_rejects_bad_arguments():
    for bad in (["--seconds", "0"], ["--cases", "alone,nope"], ["--cases", ""]):
        with pytest.raises(SystemExit):
            ba.main(bad)


def test_report_from_a_result():
    result = {"reference": {"add_ms": 0.25, "tiny_ms": 0.0021,
                            "burst8": {"burst_ms": 2.1, "first_kernel_ms": 0.3,
                                       "other_kernels_ms": 0.25}},
              "cases": {"alone": {"saturate": {"kernels": 32000, "true_s": 8.0, "exporter_s": 8.1,
                                               **ba.judge(8.0, 8.1)},
                                  "saturate:wall": {"claimed_s": 8.1, "wall_s": 9.0, "ratio": 0.9},
                                  "overclaims": 0},
                        "auto": {"burst8#1": {"kernels": 8000, "true_s": 2.0, "exporter_s": 2.5,
                                              **ba.judge(2.0, 2.5)},
                                 "burst8:wall": {"claimed_s": 5, "wall_s": 4, "ratio": 1.25},
                                 "overclaims": 3}},
              "top_frame": "nvshare-scheduler 0.1.0\n"}
    text = ba.section(result)
    assert "| alone | saturate | 32000 | 8.000 | 8.100 | **1.012** | yes | — | — |" in text
    assert "| auto | burst8#1 | 8000 | 2.000 | 2.500 | **1.250** | no | — | — |" in text
    assert "| auto | burst8 1.250 | 3 |" in text
    assert "first kernel 0.3000 ms" in text and "nvsharectl top --once" in text
    rows = ba.goals(result)
    assert len(rows) == 2 and "GPU busy time, saturate, alone" in rows[0]
    assert "per-client GPU busy time" in ba.goals({"error": "no GPU"})[0]


@pytest.mark.parametrize("ratio", [1.0, 1.25])
def test_measure_group_against_a_real_scheduler(start_scheduler, tmp_path, ratio):
    """The exporter's busy time after the warm-up is compared with the kernels' true time."""
    port = ba.free_port()
    sched = start_scheduler("off", 30.0, "--metrics-port", str(port), "--metrics-address",
                            "127.0.0.1", "--metrics-max-age", "0")
    env = {**harness.native_env(), "NVSHARE_SOCK_PATH": str(sched.socket),
           "FAKE_BUSY_RATIO": str(ratio),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    keep: dict = {}
    rows = ba.measure_group({"saturate": "saturate", "burst8": "burst8"}, sys.executable, env,
                            sched, port, 0.5, tmp_path, keep, {"add_ms": 1.0}, script=FAKE)
    for name in ("saturate", "burst8"):
        row = rows[name]
        assert row["exporter_s"] == pytest.approx(0.5, abs=1e-6), row
        assert row["ratio"] == pytest.approx(ratio, rel=1e-6)
        assert row["met"] is (ratio == 1.0)
        assert "error" not in row
    assert rows["wall"]["claimed_s"] == pytest.approx(1.0, abs=1e-6)
    assert ba.METRIC in keep["scrape"]
    assert "Busy" in keep["top"] or "failed" not in keep["top"], keep["top"]
