"""bench/quota_limits.py: its pure parts (the plan, the verdicts, the report) and its group runner
with a stand-in workload (no GPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import quota_limits as ql
import quota_workload as qw

FAKE = Path(__file__).resolve().parent / "fake_quota_workload.py"


def test_plan():
    assert ql.plan(False, None, None) == {"seconds": 8.0, "tq": 2.0, "limits": [25, 50, 75],
                                          "shares": [30, 70]}
    assert ql.plan(True, None, 0.5)["seconds"] == 3.0
    assert ql.plan(True, 5.0, 0.5) == {"seconds": 5.0, "tq": 0.5, "limits": [25, 50, 75],
                                       "shares": [30, 70]}


def test_judge_limit():
    assert ql.judge_limit(100.0, 27.9, 25) == {"percent": pytest.approx(27.9), "met": True}
    assert ql.judge_limit(100.0, 28.1, 25)["met"] is False
    assert ql.judge_limit(200.0, 96.0, 50) == {"percent": pytest.approx(48.0), "met": True}
    assert ql.judge_limit(100.0, 71.0, 75)["met"] is False
    assert ql.judge_limit(None, 50.0, 50) == {"percent": None, "met": None}
    assert ql.judge_limit(100.0, None, 50) == {"percent": None, "met": None}


def test_judge_shares():
    v = ql.judge_shares([50.0, 50.0], [29.0, 68.0], [30, 70])
    assert v["percent"] == pytest.approx([29.0 / 0.97, 68.0 / 0.97])
    assert v["expected"] == pytest.approx([30.0, 70.0])
    assert v["met"] == [True, True]
    assert v["combined_ratio"] == pytest.approx(0.97) and v["combined_met"] is True
    bad = ql.judge_shares([50.0, 50.0], [45.0, 45.0], [30, 70])
    assert bad["met"] == [False, False] and bad["combined_ratio"] == pytest.approx(0.9)
    assert bad["combined_met"] is False
    none = ql.judge_shares([50.0, None], [None, 30.0], [30, 70])
    assert none["met"] == [None, None] and none["combined_ratio"] is None


def _result():
    limits = {"none": {"ips": 200.0}}
    for lim, ips in ((25, 51.0), (50, 90.0), (75, 150.0)):
        limits[str(lim)] = {"ips": ips, **ql.judge_limit(200.0, ips, lim)}
    return {"parameters": {"seconds": 8.0, "tq": 2.0, "shares": [30, 70]}, "limits": limits,
            "shares": {"without": [100.0, 100.0], "with": [60.0, 135.0],
                       "verdict": ql.judge_shares([100.0, 100.0], [60.0, 135.0], [30, 70])}}


def test_report_from_a_result():
    r = _result()
    text = ql.section(r)
    assert "| alone, NVSHARE_COMPUTE_LIMIT=25 | 51.0 | **25.5** | 25 ± 3 | **yes** |" in text
    assert "| alone, NVSHARE_COMPUTE_LIMIT=50 | 90.0 | **45.0** | 50 ± 3 | **no** |" in text
    assert "| NVSHARE_COMPUTE_SHARE=30 / 70 | 60.0 / 135.0 | 195.0 | **30.8 / 69.2** | 30 / 70 ± 3 | " \
           "**yes** / **yes** |" in text
    assert "Combined throughput with shares over without: **0.975x**" in text
    rows = ql.goals(r)
    assert len(rows) == 6
    assert "compute limit 25%" in rows[0] and "**yes**" in rows[0]
    assert "compute limit 50%" in rows[1] and "**no**" in rows[1]
    assert "compute share 70 (of 30+70)" in rows[4] and "**69.2%**" in rows[4]
    assert "**0.975x**" in rows[5]
    assert "compute limits and shares" in ql.goals({"error": "no GPU"})[0]
    assert ql.all_met(r) is False
    r["limits"]["50"] = {"ips": 100.0, **ql.judge_limit(200.0, 100.0, 50)}
    assert ql.all_met(r) is True


def test_main_rejects_bad_arguments():
    for argv in (["--seconds", "0"], ["--tq", "0"], ["--bogus"]):
        with pytest.raises(SystemExit):
            ql.main(argv)


def test_workload_arguments():
    a = qw.parse(["--seconds", "3", "--warm", "w", "--go", "g", "--ready", "r"])
    assert (a.seconds, a.matrix, a.dtype, a.ready) == (3.0, 4096, "float16", "r")
    with pytest.raises(SystemExit):
        qw.parse(["--dtype", "int8", "--warm", "w", "--go", "g", "--ready", "r"])


def test_run_group_starts_them_together_and_reads_their_results(tmp_path):
    env = {**os.environ, "FAKE_IPS": "80", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = ql.run_group([env, {**env, "NVSHARE_COMPUTE_LIMIT": "25"}], sys.executable, 0.2, tmp_path,
                       "t", script=FAKE)
    assert [r["ips"] for r in out] == [80.0, 20.0]
    assert (tmp_path / "t.go").exists()
