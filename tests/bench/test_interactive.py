"""CPU tests of bench/scheduling/interactive.py: the plan, the batch job's throughput, what the scheduler's log
says about each interactive step, the result's figures, the command line, and a dry run with
simulated jobs against a real scheduler."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
from bench.scheduling import interactive  # noqa: E402
from bench.core import gpu_memory  # noqa: E402
from bench.scheduling import jobs  # noqa: E402
from bench.core import stats  # noqa: E402
from bench.core.common import harness  # noqa: E402
from bench.scheduling.job_program import GIB  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"
BATCH, INTER = 100, 200


def ev(t: float, kind: str, pid: int, **fields: str) -> harness.Event:
    return harness.Event(t, kind, pid, dict(fields))


# ----------------------------------------------------------------------------- plan

def test_plan_fits_its_budget_and_shrinks_to_the_time_left():
    full = interactive.plan_interactive(False, None)
    assert full.count == 10 and full.period == 2.0 and full.estimate_s() <= 55
    assert full.together_s() >= full.count * full.period
    quick = interactive.plan_interactive(True, None)
    assert quick.count < full.count and quick.estimate_s() < full.estimate_s()
    short = interactive.plan_interactive(False, full.estimate_s() - 1)
    assert short.estimate_s() <= full.estimate_s() - 1 and short.notes
    with pytest.raises(RuntimeError, match="not enough time"):
        interactive.plan_interactive(False, 5)


def test_plan_overrides_apply_and_none_keeps_the_default():
    plan = interactive.plan_interactive(False, None, count=4, period=None, idle_release_ms=-1)
    assert plan.count == 4 and plan.period == interactive.PERIOD_S and plan.idle_release_ms == -1


def test_the_two_jobs_do_not_fit_together_and_stay_within_the_safety_limit():
    sizes = [interactive.BATCH_SIZE.footprint_estimate(), interactive.INTERACTIVE_SIZE.footprint_estimate()]
    assert gpu_memory.library_total_problem(sizes) is None
    capacity = gpu_memory.separating_capacity(sizes)
    assert gpu_memory.separates(sizes, gpu_memory.budget_of(capacity))


# ----------------------------------------------------------------------------- throughput

def _train(t_start: float, step_s: list[float]) -> dict:
    return {"pid": BATCH, "t_start": t_start, "t_end": t_start + sum(step_s), "steps": len(step_s),
            "step_s": step_s, "final_loss": 0.5, "resident": {"ok": True}}


def test_throughput_over_a_run_and_within_a_window():
    run = _train(10.0, [0.1] * 50)  # 5 s, 10 steps/s
    assert interactive.throughput(run) == pytest.approx(10.0)
    # steps end at 10.1, 10.2, ...: 10 of them end within [11.0, 12.0) plus the one at 12.0
    assert interactive.throughput(run, 11.05, 12.05) == pytest.approx(10.0)
    slowed = _train(10.0, [0.1] * 10 + [1.0] + [0.1] * 10)  # a step waited 0.9 s
    assert interactive.throughput(slowed, 10.0, 13.0) == pytest.approx(21 / 3.0)
    assert interactive.throughput(slowed, 10.0, 11.5) == pytest.approx(10 / 1.5)


# ----------------------------------------------------------------------------- one step in the log

def _step_events(t0: float, drop_after: float = 0.005, handoff: float = 0.19, grant_after: float = 0.2,
                 own_prefetch_ms: str = "0.0ms") -> list:
    return [
        ev(t0 + drop_after, "drop", BATCH, reason="preempted", evict="yes"),
        ev(t0 + drop_after + handoff, "release", BATCH, reason="dropped", held="1.70s", drain="8.0ms",
           evict="170.0ms", prefetch="130.0ms"),
        ev(t0 + grant_after, "grant", INTER, quantum="30s", prefetch="no"),
        ev(t0 + 0.3, "release", INTER, reason="idle", held="0.06s", drain="0.1ms", evict="0.0ms",
           prefetch=own_prefetch_ms),
        ev(t0 + 0.36, "grant", BATCH, quantum="30s", prefetch="yes"),
    ]


def test_a_steps_switch_is_the_batch_jobs_handoff_plus_the_clients_own_prefetch():
    step = {"t0": 10.0, "t1": 10.22, "dt": 0.22, "planned": 10.0}
    found = interactive.step_switches(_step_events(10.0, own_prefetch_ms="12.0ms"), step, BATCH, INTER)
    assert found["drop_reason"] == "preempted"
    assert found["handoff_ms"] == pytest.approx(190.0)
    assert found["evict_ms"] == pytest.approx(170.0) and found["drain_ms"] == pytest.approx(8.0)
    assert found["prefetch_ms"] == pytest.approx(12.0)
    assert found["switch_ms"] == pytest.approx(202.0)
    assert found["grant_wait_ms"] == pytest.approx(200.0)


def test_a_step_without_a_drop_has_no_switch():
    step = {"t0": 10.0, "t1": 10.01, "dt": 0.01, "planned": 10.0}
    events = [ev(10.002, "grant", INTER, quantum="30s", prefetch="no"),
              ev(9.0, "drop", BATCH, reason="preempted", evict="yes")]  # an earlier step's
    found = interactive.step_switches(events, step, BATCH, INTER)
    assert found["switch_ms"] is None and found["handoff_ms"] is None and found["drop_reason"] is None
    assert found["grant_wait_ms"] == pytest.approx(2.0)


# ----------------------------------------------------------------------------- the figures

def _measurements(waits_s: list[float], alone_s: float = 0.01, period: float = 2.0):
    plan = interactive.InteractivePlan(count=len(waits_s), period=period)
    calibration = {"steps": [{"planned": 0.0, "t0": 0.0, "t1": alone_s, "dt": alone_s}] * 5}
    first = 100.0
    steps, events = [], []
    for k, wait in enumerate(waits_s):
        t0 = first + k * period
        dt = alone_s + wait
        steps.append({"planned": t0, "t0": t0, "t1": t0 + dt, "dt": dt})
        events += _step_events(t0, handoff=0.19, grant_after=0.2)
    together = {"steps": steps, "t_start": first, "t_end": steps[-1]["t1"]}
    batch_alone = _train(50.0, [0.01] * 500)  # 100 steps/s
    # alongside: 0.4 s of each 2 s period lost
    step_s = []
    for _ in range(len(waits_s)):
        step_s += [0.01] * 160 + [0.4]
    batch_together = _train(first - 0.005, step_s)
    return plan, calibration, batch_alone, batch_together, together, events


def test_waits_percentiles_switch_and_goal():
    waits = [0.2] * 9 + [0.25]  # ms: 200 x 9, 250 once
    result = interactive.interactive_results(*_measurements(waits), BATCH, INTER)
    w = result["wait_ms"]
    assert w["n"] == 10 and w["p50"] == pytest.approx(200.0)
    assert w["p99"] == pytest.approx(stats.percentile([200.0] * 9 + [250.0], 99))
    assert w["max"] == pytest.approx(250.0)
    assert result["interactive_alone_ms"] == pytest.approx(10.0)
    assert result["switch_ms"] == pytest.approx(190.0)
    assert result["p99_minus_switch_ms"] == pytest.approx(w["p99"] - 190.0)
    assert result["met"] is True  # 59.5 ms over the switch < 100 ms
    assert result["excess_ms"]["p50"] == pytest.approx(10.0)
    assert result["batch_switches"]["count"] == 10 and result["batch_switches"]["reasons"] == ["preempted"]
    assert result["batch_steps_per_s"]["alone"] == pytest.approx(100.0)
    assert 1.1 < result["batch_slowdown"] < 1.4
    json.dumps(result)


def test_a_wait_far_over_the_switch_misses_the_goal():
    result = interactive.interactive_results(*_measurements([0.2] * 9 + [0.6]), BATCH, INTER)
    assert result["p99_minus_switch_ms"] > 100 and result["met"] is False


def test_without_log_events_there_is_no_switch_and_no_verdict():
    plan, calibration, alone, together_batch, together, _ = _measurements([0.001] * 3)
    result = interactive.interactive_results(plan, calibration, alone, together_batch, together, [], BATCH, INTER)
    assert result["switch_ms"] is None and result["p99_minus_switch_ms"] is None and result["met"] is None
    assert result["wait_ms"]["n"] == 3


# ----------------------------------------------------------------------------- the command line

@pytest.mark.parametrize("argv", [["--count", "0"], ["--period", "-2"], ["--mode", "x"], ["--priority", "high"]])
def test_cli_refuses_bad_values(argv):
    with pytest.raises(SystemExit) as e:
        interactive.build_parser().parse_args(argv)
    assert e.value.code == 2


def test_cli_passes_its_settings_to_the_plan(monkeypatch, tmp_path):
    seen = {}

    def fake_measure(lib, plan, **kw):
        seen.update(plan=plan, **kw)
        raise SystemExit(0)

    monkeypatch.setattr(interactive, "measure_interactive", fake_measure)
    monkeypatch.setattr(interactive, "require_safe_gpu", lambda strict=True: None)
    monkeypatch.setattr(interactive.harness, "library_path", lambda: tmp_path / "libnvshare.so")
    with pytest.raises(SystemExit):
        interactive.main(["--count", "4", "--idle-release-ms", "-1", "--priority", "7", "--capacity-gib", "9",
                          "--batch-resident-gib", "3", "--mode", "serial"])
    plan = seen["plan"]
    assert plan.count == 4 and plan.idle_release_ms == -1 and plan.priority == 7
    assert plan.capacity == 9 * GIB and plan.batch.resident_gib == 3
    assert seen["mode"] == "serial" and seen["simulate_ms"] is None


# ----------------------------------------------------------------------------- dry run

@pytest.mark.timeout(180)
@pytest.mark.parametrize("idle_release_ms", [50, -1])
def test_dry_run(monkeypatch, idle_release_ms):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
    started = []
    real_start = jobs.JobGroup.start

    def recording_start(self, name, argv, env):
        started.append((name, env))
        return real_start(self, name, argv, env)

    monkeypatch.setattr(jobs.JobGroup, "start", recording_start)
    plan = interactive.InteractivePlan(count=3, period=0.3, batch_alone_s=0.3, calibration_steps=3,
                                       idle_release_ms=idle_release_ms)
    result = interactive.measure_interactive(None, plan, simulate_ms=2.0, mode="off",
                                             scheduler_args=("--no-nvml",))
    json.dumps(result)
    assert result["wait_ms"]["n"] == 3 and len(result["steps"]) == 3
    assert len(result["calibration_ms"]) == 3
    assert result["batch_steps_per_s"]["alone"] > 0 and result["batch_steps_per_s"]["together"] > 0
    assert result["switch_ms"] is None  # simulated jobs never ask the scheduler for the GPU
    envs = dict(started)
    assert envs["interactive"]["NVSHARE_PRIORITY"] == str(plan.priority)
    assert "NVSHARE_PRIORITY" not in envs["batch"]
    if idle_release_ms >= 0:
        assert envs["interactive"]["NVSHARE_IDLE_RELEASE_MS"] == str(idle_release_ms)
    else:
        assert "NVSHARE_IDLE_RELEASE_MS" not in envs["interactive"]
    assert "NVSHARE_IDLE_RELEASE_MS" not in envs["batch"]
