"""bench/multigpu/gang_ddp.py: its plan and command lines, the verdicts and the report from a made-up
result, and all four phases end to end with a stand-in for torchrun and the training job (no torch,
no GPU) and a stand-in scheduler whose log is given."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.multigpu import gang_ddp as gd
from bench.multigpu import gang_ddp_report as gr

HERE = Path(__file__).resolve().parent
FAKE = [sys.executable, str(HERE / "fake_torchrun.py")]
GRANTS = "grant pid=11 gpu=0 quantum=0.5s prefetch=no\ndrop pid=11 gpu=0 reason=quantum evict=no\n"


def test_plan_and_arguments():
    assert gd.plan(False) == {"steps": 600, "tq": 0.5, "nproc": 2, "seed": 7, "base_port": 29610}
    assert gd.plan(True)["steps"] == 250
    assert gd.plan(True, 40, 1.0, 31000) == {"steps": 40, "tq": 1.0, "nproc": 2, "seed": 7,
                                             "base_port": 31000}
    a = gd.parse(["--quick", "--steps", "100", "--tq", "0.25", "--port", "30000"])
    assert (a.quick, a.steps, a.tq, a.port, a.json) == (True, 100, 0.25, 30000, None)
    for bad in (["--steps", "5"], ["--tq", "0"], ["--port", "80"], ["--port", "65530"], ["--bogus"]):
        with pytest.raises(SystemExit):
            gd.parse(bad)


def test_job_argv_names_the_job_and_its_rendezvous(tmp_path):
    argv = gd.job_argv(["py", "-m", "torch.distributed.run"], 2, 29611, "gang-x-a", 50, 7,
                       tmp_path / "o.json")
    assert argv[:3] == ["py", "-m", "torch.distributed.run"]
    for flag, value in (("--nproc-per-node", "2"), ("--master-port", "29611"), ("--rdzv-id", "gang-x-a"),
                        ("--steps", "50"), ("--seed", "7"), ("--json-out", str(tmp_path / "o.json"))):
        assert argv[argv.index(flag) + 1] == value
    # torchrun's own options come before the script, the job's after it.
    assert argv.index("--rdzv-id") < argv.index(str(gd.EXAMPLE)) < argv.index("--steps")


def test_compare_is_bitwise():
    ref = {"losses": [1.0, 0.5, 0.25], "params_sha256": "abc"}
    assert gr.compare(dict(ref), ref) == {"same_losses": True, "same_params": True, "first_difference": None}
    c = gr.compare({"losses": [1.0, 0.5 + 1e-12, 0.25], "params_sha256": "abc"}, ref)
    assert c["same_losses"] is False and c["first_difference"] == 1
    assert gr.compare({"losses": [1.0, 0.5], "params_sha256": "abd"}, ref) == \
        {"same_losses": False, "same_params": False, "first_difference": 2}
    assert gr.compare({"returncode": 1}, ref)["same_losses"] is None


def _job(run_id, losses, code=0, sha="s"):
    return {"run_id": run_id, "returncode": code, "losses": losses, "params_sha256": sha,
            "wall_s": 10.0, "seconds": 8.0, "final_loss": losses[-1] if losses else None}


def _result(native=20.0, auto=20.5, evictions=0, b_losses=(1.0, 0.5)):
    alone = _job("gang-alone", [1.0, 0.5])
    r = {"parameters": {"steps": 2, "tq": 0.5, "nproc": 2}, "alone": alone,
         "native_pair": {"wall_s": native, "jobs": [_job("n-a", [1.0, 0.5]), _job("n-b", [1.0, 0.5])]},
         "serial": {"wall_s": 41.0, "evictions": evictions, "drops": 30, "evict_lines": [],
                    "jobs": [_job("s-a", [1.0, 0.5]), _job("s-b", list(b_losses))]},
         "auto": {"wall_s": auto, "evictions": 0, "drops": 0,
                  "jobs": [_job("a-a", [1.0, 0.5]), _job("a-b", [1.0, 0.5])]}}
    return r


def test_judge():
    v = gr.judge(_result())
    assert v == {"serial_finished": True, "serial_same_as_alone": True, "serial_no_eviction": True,
                 "auto_same_as_alone": True, "auto_ratio": pytest.approx(1.025), "auto_met": True}
    assert gr.all_met(_result()) is True
    assert gr.judge(_result(auto=22.0))["auto_met"] is False
    assert gr.judge(_result(evictions=1))["serial_no_eviction"] is False
    assert gr.judge(_result(b_losses=(1.0, 0.4)))["serial_same_as_alone"] is False
    failed = _result()
    failed["serial"]["jobs"][1] = {"run_id": "s-b", "returncode": None, "timed_out": True}
    v = gr.judge(failed)
    assert v["serial_finished"] is False and v["serial_same_as_alone"] is False
    assert gr.all_met(failed) is False
    no_auto = _result()
    no_auto["auto"]["jobs"][0]["returncode"] = 1
    assert gr.judge(no_auto)["auto_ratio"] is None and gr.judge(no_auto)["auto_met"] is None


def test_evict_lines_are_forced_evictions_only():
    log = (GRANTS + "drop pid=12 gpu=0 reason=memory evict=yes\n"
           "evict pid=13 gpu=0 after 9.0s without LOCK_RELEASED; closing its connection\n"
           "release pid=11 gpu=0 reason=drop held=0.50s drain=1.0ms evict=0.0ms\n")
    assert gr.evict_lines(log) == [log.splitlines()[3]]
    assert gr.evict_lines(GRANTS) == []


def test_report_from_a_result():
    r = _result(auto=23.0)
    rows = gd.goals(r)
    assert len(rows) == 4
    assert "both finish" in rows[0] and "**2 of 2**" in rows[0] and "**yes**" in rows[0]
    assert "losses and parameters" in rows[1] and "**yes**" in rows[1]
    assert "forced evictions" in rows[2] and "**0**" in rows[2]
    assert "**1.150x**" in rows[3] and "<= 1.05x" in rows[3] and "**no**" in rows[3]
    text = gd.section(r)
    assert "| under the library, mode auto | 23.0 | 1.150x |" in text
    assert "| side by side, natively | 20.0 | 1.000x |" in text
    assert "30 drops (turns), 0 forced evictions" in text
    assert "gang-scheduled DDP jobs" in gd.goals({"error": "no GPU"})[0]
    assert "Not measured" in gd.section({"error": "no GPU"})


def _fake_scheduler(log_text, seen):
    @contextmanager
    def scheduler(mode, tq):
        seen.append((mode, tq))
        yield {**os.environ, "FAKE_MODE": mode}, lambda: log_text
    return scheduler


def test_all_four_phases_with_stand_ins(tmp_path):
    p = gd.plan(True, 12, 0.5, 31000)
    seen = []
    r = gd.measure_parts(p, FAKE, dict(os.environ), _fake_scheduler(GRANTS, seen), tmp_path)
    assert seen == [("serial", 0.5), ("auto", 0.5)]
    assert len(r["alone"]["losses"]) == 12 and r["alone"]["port"] == 31000
    ports = [j["port"] for k in ("native_pair", "serial", "auto") for j in r[k]["jobs"]]
    assert ports == list(range(31001, 31007))  # every job a master port of its own
    ids = [j["run_id"] for k in ("native_pair", "serial", "auto") for j in r[k]["jobs"]]
    assert len(set(ids)) == 6 and "gang-serial-a" in ids
    assert all("losses" not in j and j["same_losses"] and j["same_params"]
               for k in ("native_pair", "serial", "auto") for j in r[k]["jobs"])
    assert r["serial"]["evictions"] == 0 and r["serial"]["drops"] == 1
    v = r["verdict"]
    assert v["serial_finished"] and v["serial_same_as_alone"] and v["serial_no_eviction"]
    assert v["auto_ratio"] is not None and v["auto_ratio"] > 0
    assert "**yes** / **yes**" in gd.section(r)


def test_a_differing_or_failing_job_fails_its_goal(tmp_path, monkeypatch):
    p = gd.plan(True, 12, 0.5, 31100)
    monkeypatch.setenv("FAKE_DDP_DIFFER", "gang-serial-b")
    evicted = GRANTS + "evict pid=13 gpu=0 after 9.0s without LOCK_RELEASED; closing\n"
    r = gd.measure_parts(p, FAKE, dict(os.environ), _fake_scheduler(evicted, []), tmp_path)
    b = r["serial"]["jobs"][1]
    assert b["same_losses"] is False and b["first_difference"] == 3 and b["same_params"] is False
    assert r["verdict"]["serial_same_as_alone"] is False
    assert r["serial"]["evictions"] == 1 and r["verdict"]["serial_no_eviction"] is False
    assert "**no** / **no**" in gd.section(r)
    monkeypatch.setenv("FAKE_DDP_FAIL", "gang-auto-a")
    monkeypatch.delenv("FAKE_DDP_DIFFER")
    r = gd.measure_parts(p, FAKE, dict(os.environ), _fake_scheduler(GRANTS, []), tmp_path)
    a = r["auto"]["jobs"][0]
    assert a["returncode"] == 1 and "rank 1 failed" in a["stderr_tail"]
    assert r["verdict"]["auto_met"] is None and gr.all_met(r) is False


def test_a_hung_pair_is_killed_and_not_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(gd, "PAIR_TIMEOUT_EXTRA_S", 0.5)
    monkeypatch.setattr(gd, "PAIR_TIMEOUT_FACTOR", 0.0)
    p = gd.plan(True, 12, 0.5, 31200)
    out = gd.run_jobs([("hung", 31200)], p, FAKE, {**os.environ, "FAKE_DDP_SLEEP": "30"}, tmp_path, 0.5)
    (job,) = out["jobs"]
    assert job["timed_out"] is True and job["returncode"] is None and out["wall_s"] < 10


def test_the_job_alone_failing_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DDP_FAIL", "gang-alone")
    with pytest.raises(RuntimeError, match="the job alone failed"):
        gd.measure_parts(gd.plan(True, 12), FAKE, dict(os.environ), _fake_scheduler("", []), tmp_path)


def test_the_example_is_valid_python():
    # The training job needs torch, which is not here: at least it must compile.
    compile(gd.EXAMPLE.read_text(), str(gd.EXAMPLE), "exec")
