"""CPU tests of bench/scheduling/makespan.py, makespan_fit.py and makespan_pair.py: the plans, the result tables, the command line, and a dry run of
makespan_fit and makespan_pair with simulated jobs against a real scheduler."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
from bench.scheduling import jobs  # noqa: E402
from bench.scheduling import makespan  # noqa: E402
from bench.scheduling import makespan_common  # noqa: E402
from bench.scheduling import makespan_fit  # noqa: E402
from bench.scheduling import makespan_pair  # noqa: E402
from bench.scheduling.job_program import GIB  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def children_find_xpushare(monkeypatch):
    """The scheduler subprocess imports xpushare from the source tree."""
    paths = [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


# ----------------------------------------------------------------------------- plans

def test_plans_fit_their_budgets():
    assert makespan_fit.plan_fitting(False, None).estimate_s() <= 120
    assert makespan_fit.plan_fitting(True, None).estimate_s() <= 65
    assert makespan_pair.plan_pair(False, None).estimate_s() <= 130
    assert makespan_pair.plan_pair(True, None).estimate_s() <= 80


def test_plans_shrink_to_the_time_left_and_refuse_when_nothing_fits():
    full = makespan_fit.plan_fitting(False, None)
    assert full.counts == (2, 4) and full.reps == 2
    short = makespan_fit.plan_fitting(False, full.estimate_s() - 1)
    assert short.estimate_s() <= full.estimate_s() - 1 and short.notes
    quick = makespan_fit.plan_fitting(True, None)
    assert quick.reps == 1 and quick.alone_s < full.alone_s
    with pytest.raises(RuntimeError, match="not enough time"):
        makespan_fit.plan_fitting(False, 5)
    pair_quick = makespan_pair.plan_pair(True, None)
    assert pair_quick.tqs == (5,)
    assert makespan_pair.plan_pair(False, None).tqs == (5, 30)
    with pytest.raises(RuntimeError, match="not enough time"):
        makespan_pair.plan_pair(True, 10)


def test_pair_jobs_do_not_end_on_a_quantum_boundary():
    for quick in (False, True):
        plan = makespan_pair.plan_pair(quick, None)
        for tq in plan.tqs:
            fraction = (plan.alone_s / tq) % 1
            assert 0.1 < fraction < 0.9 or plan.alone_s < tq


def test_steps_for_a_time_alone():
    assert makespan_common.steps_for(4.5, 0.0015) == 3000
    assert makespan_common.steps_for(0.01, 0.5) == 10
    with pytest.raises(ValueError):
        makespan_common.steps_for(4.5, 0.0)


# ----------------------------------------------------------------------------- result tables

def _summary(seconds: float, pid: int = 1) -> dict:
    return jobs.summarise_train({"pid": pid, "t_start": 0.0, "t_end": seconds, "steps": 2,
                                 "step_s": [seconds / 2] * 2, "final_loss": 0.25, "resident": {"ok": True}})


def _round(way: str, count: int, rep: int, makespan_s: float) -> dict:
    return {"way": way, "count": count, "rep": rep, "makespan_s": makespan_s,
            "jobs": [_summary(makespan_s, pid=i) for i in range(count)]}


def test_fitting_table_compares_auto_with_concurrent_and_sequential():
    plan = makespan_fit.FittingPlan(counts=(2, 4), reps=2)
    alone = [_summary(4.0), _summary(5.0), _summary(4.0), _summary(5.0)]
    rounds = [_round("concurrent", 2, 0, 5.0), _round("auto", 2, 0, 5.05), _round("auto", 2, 1, 5.15),
              _round("concurrent", 2, 1, 5.0), _round("concurrent", 4, 0, 8.0), _round("auto", 4, 0, 9.0)]
    table = makespan_fit.fitting_results(plan, 100, alone, rounds)
    two, four = table["jobs"][2], table["jobs"][4]
    assert two["sequential"] == pytest.approx(9.0) and four["sequential"] == pytest.approx(18.0)
    assert two["auto"] == pytest.approx(5.1) and two["concurrent"] == pytest.approx(5.0)
    assert two["auto_vs_concurrent"] == pytest.approx(1.02) and two["met"] is (5.1 / 5.0 <= 1.02)
    assert two["pair_ratios"] == pytest.approx([1.01, 1.03])
    assert four["auto_vs_concurrent"] == pytest.approx(1.125) and four["met"] is False
    assert four["auto_vs_sequential"] == pytest.approx(0.5)
    assert table["correctness"]["ok"]
    json.dumps(table)  # serialisable


def test_fitting_table_without_one_side_has_no_ratio():
    plan = makespan_fit.FittingPlan(counts=(2,), reps=1)
    table = makespan_fit.fitting_results(plan, 10, [_summary(1.0), _summary(1.0)], [_round("concurrent", 2, 0, 1.2)])
    assert table["jobs"][2]["auto"] is None and table["jobs"][2]["auto_vs_concurrent"] is None
    assert table["jobs"][2]["met"] is None


def _pair_round(variant: str, tq: int, makespan_s: float, switches: int) -> dict:
    record = _round("pair", 2, 0, makespan_s)
    record.update(variant=variant, tq=tq, switch={"count": switches})
    return record


def test_pair_table_against_one_after_the_other():
    plan = makespan_pair.PairPlan(tqs=(5, 30))
    alone = [_summary(7.5), _summary(7.5)]
    rounds = [_pair_round("fast", 5, 16.0, 2), _pair_round("demand", 5, 19.5, 2),
              _pair_round("fast", 30, 15.3, 0), _pair_round("demand", 30, 15.4, 0)]
    table = makespan_pair.pair_results(plan, 100, alone, rounds)["tq"]
    five, thirty = table[5], table[30]
    assert five["sequential"] == pytest.approx(15.0)
    assert five["fast_vs_sequential"] == pytest.approx(16.0 / 15.0) and five["met"] is True
    assert five["demand_vs_sequential"] == pytest.approx(1.3)
    assert five["switches"] == 2 and five["switches_demand"] == 2 and "note" not in five
    assert thirty["switches"] == 0 and "no switch" in thirty["note"]


def test_pair_table_with_a_skipped_variant():
    plan = makespan_pair.PairPlan(tqs=(5, 30))
    table = makespan_pair.pair_results(plan, 100, [_summary(7.5), _summary(7.5)],
                                  [_pair_round("fast", 5, 17.0, 3)])["tq"]
    assert list(table) == [5]
    assert table[5]["demand"] is None and table[5]["demand_vs_sequential"] is None
    assert table[5]["met"] is False  # 17 / 15 > 1.10


# ----------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("argv", [["--jobs", "2,x"], ["--jobs", "0"], ["--tq", "0"], ["--tq", "5.5"],
                                  ["--alone-s", "-1"], ["--mode", "fast"]])
def test_cli_refuses_bad_values(argv, capsys):
    with pytest.raises(SystemExit) as e:
        makespan.build_parser().parse_args(argv)
    assert e.value.code == 2


@pytest.mark.parametrize("argv, expected", [([], ["fitting", "pair"]), (["--pair"], ["pair"]),
                                            (["--jobs", "2,4"], ["fitting"]),
                                            (["--jobs", "2", "--pair"], ["fitting", "pair"])])
def test_cli_selects_what_to_run(argv, expected, monkeypatch, tmp_path):
    called = []
    monkeypatch.setattr(makespan_fit, "run_fitting", lambda quick, left, **kw: called.append(("fitting", kw)) or {})
    monkeypatch.setattr(makespan_pair, "run_pair", lambda quick, left, **kw: called.append(("pair", kw)) or {})
    out = tmp_path / "out.json"
    assert makespan.main([*argv, "--json", str(out)]) == 0
    assert [name for name, _ in called] == expected
    assert set(json.loads(out.read_text())) == set(expected)
    if "--jobs" in argv:
        assert called[0][1]["counts"] == tuple(sorted(int(v) for v in argv[1].split(",")))


def test_run_records_a_failing_half_and_still_runs_the_other(monkeypatch):
    def broken(quick, left):
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(makespan_fit, "run_fitting", broken)
    monkeypatch.setattr(makespan_pair, "run_pair", lambda quick, left: {"tq": {}})
    out = makespan.run(True, 100.0)
    assert "no GPU here" in out["fitting"]["error"] and out["pair"] == {"tq": {}}


# ----------------------------------------------------------------------------- dry runs

@pytest.mark.timeout(180)
def test_dry_run_of_fitting_jobs(children_find_xpushare):
    plan = makespan_fit.FittingPlan(counts=(2, 3), reps=1, steps=15)
    result = makespan_fit.measure_fitting(None, plan, jobs.Deadline(None), simulate_ms=2.0, mode="off",
                                      scheduler_args=("--no-nvml",))
    json.dumps(result)
    assert result["steps"] == 15 and len(result["alone"]) == 3
    assert all(s["steps"] == 15 for s in result["alone"])
    assert sorted((r["way"], r["count"]) for r in result["rounds"]) == [
        ("auto", 2), ("auto", 3), ("concurrent", 2), ("concurrent", 3)]
    for count in (2, 3):
        row = result["jobs"][count]
        assert row["sequential"] == pytest.approx(sum(s["seconds"] for s in result["alone"][:count]))
        assert row["auto"] > 0 and row["concurrent"] > 0 and row["auto_vs_concurrent"] > 0
    assert all(len(r["jobs"]) == r["count"] for r in result["rounds"])
    assert result["correctness"]["ok"]
    assert result["params"]["simulated"] is True


@pytest.mark.timeout(180)
def test_dry_run_of_the_pair(children_find_xpushare, monkeypatch):
    started = {}
    real_start = jobs.JobGroup.start
    monkeypatch.setattr(jobs.JobGroup, "start", lambda self, name, argv, env: (
        started.__setitem__(name, env), real_start(self, name, argv, env))[1])
    plan = makespan_pair.PairPlan(tqs=(5, 30), steps=10, capacity=12 * GIB)
    result = makespan_pair.measure_pair(None, plan, jobs.Deadline(None), simulate_ms=2.0, mode="off",
                                   scheduler_args=("--no-nvml",))
    assert sorted(started) == ["demandA", "demandB", "fastA", "fastB", "nativeA", "nativeB"]
    assert {started[n]["NVSHARE_PREFETCH"] for n in ("fastA", "fastB")} == {"wait"}
    assert {started[n]["NVSHARE_PREFETCH"] for n in ("demandA", "demandB")} == {"off"}
    assert {started[n]["NVSHARE_IDLE_RELEASE_MS"] for n in ("fastA", "demandB")} == {"50"}
    assert not any(k.startswith("NVSHARE_") and k != "NVSHARE_LIBRARY" for k in started["nativeA"])
    json.dumps(result)
    assert sorted((r["variant"], r["tq"]) for r in result["rounds"]) == [
        ("demand", 5), ("demand", 30), ("fast", 5), ("fast", 30)]
    assert set(result["tq"]) == {5, 30}
    row = result["tq"][5]
    assert row["sequential"] == pytest.approx(sum(s["seconds"] for s in result["alone"]))
    assert row["fast"] > 0 and row["demand"] > 0
    assert row["switches"] == 0  # simulated jobs never ask the scheduler for anything
    assert result["params"]["capacity"] == 12 * GIB and not result["skipped"]
    assert math.isclose(result["steps"], 10)
