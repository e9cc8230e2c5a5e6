"""CPU tests of bench/scheduling/jobs.py: the process group that drives job programs, a round's makespan, the
summaries and the correctness check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.core import gpu_memory
from bench.scheduling import job_program
from bench.scheduling import jobs
from bench.core.common import harness
from bench.scheduling.job_program import GIB


# ----------------------------------------------------------------------------- processes

def _simulated(group: jobs.JobGroup, name: str, step_ms: float = 2.0) -> jobs.JobProcess:
    return group.start(name, jobs.job_argv(jobs.JobSize(), step_ms, ["--warmup-steps", "1", "--probe-steps", "2"]),
                       jobs.native_env(harness))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(")")[-1].split()[0] == "Z")


def test_a_group_starts_jobs_runs_a_common_round_and_ends_them():
    with jobs.JobGroup("test") as group:
        a, b = _simulated(group, "a"), _simulated(group, "b")
        ready = group.wait_ready(60)
        assert {ready["a"]["pid"], ready["b"]["pid"]} == {a.pid, b.pid}
        assert ready["a"]["device"] == "simulated"
        rnd = group.train(["a", "b"], steps=10, timeout=60)
        assert {r["steps"] for r in rnd.results.values()} == {10}
        assert all(r["start"] == rnd.start for r in rnd.results.values())
        assert rnd.makespan() == max(r["t_end"] for r in rnd.results.values()) - rnd.start
        again = group.train(["b"], steps=4, timeout=60)
        assert list(again.results) == ["b"] and again.results["b"]["steps"] == 4
    assert a.proc.poll() is not None and b.proc.poll() is not None


def test_a_group_ends_its_jobs_when_the_benchmark_fails():
    pids = []
    with pytest.raises(RuntimeError, match="benchmark broke"):
        with jobs.JobGroup("test") as group:
            pids = [_simulated(group, "a").pid, _simulated(group, "b").pid]
            group.wait_ready(60)
            group.jobs["a"].send(job_program.train_command(0.0, steps=100_000))  # busy for minutes
            raise RuntimeError("benchmark broke")
    assert pids and not any(_alive(pid) for pid in pids)


def test_a_job_that_exits_is_reported_with_its_stderr():
    with jobs.JobGroup("test") as group:
        _simulated(group, "a")
        group.wait_ready(60)
        group.jobs["a"].send({"cmd": "fly"})
        with pytest.raises(jobs.JobFailed, match="exited with 2") as e:
            group.jobs["a"].expect("result", 30)
        assert "bad command" in str(e.value)


def test_a_job_that_does_not_answer_in_time_fails_the_wait():
    with jobs.JobGroup("test") as group:
        _simulated(group, "a", step_ms=50)
        group.wait_ready(60)
        group.jobs["a"].send(job_program.train_command(0.0, steps=1000))
        with pytest.raises(jobs.JobFailed, match="no result within"):
            group.jobs["a"].expect("result", 0.2)


def test_standalone_mode_runs_one_command_and_exits():
    run = harness.run(jobs.job_argv(jobs.JobSize(), 1.0, ["--steps", "7", "--warmup-steps", "0"]),
                      jobs.native_env(harness), timeout=60).check()
    kinds = [job_program.parse_output_line(line) for line in run.stdout.splitlines()]
    assert [k for k, _ in kinds] == ["ready", "result"]
    assert kinds[1][1]["steps"] == 7


def test_library_environment_keeps_the_virtual_capacity_at_least_the_schedulers(tmp_path):
    lib = tmp_path / "libnvshare.so"
    small = jobs.library_env(harness, lib, tmp_path / "s.sock", 9 * GIB, NVSHARE_PREFETCH="off")
    assert int(small["NVSHARE_GPU_MEMORY"]) == gpu_memory.CLIENT_VIRTUAL_CAPACITY
    assert str(lib) in small["LD_PRELOAD"] and small["NVSHARE_PREFETCH"] == "off"
    big = jobs.library_env(harness, lib, tmp_path / "s.sock", 20 * GIB)
    assert int(big["NVSHARE_GPU_MEMORY"]) == 20 * GIB
    dry = jobs.library_env(harness, None, tmp_path / "s.sock", 9 * GIB)
    assert "libnvshare" not in dry.get("LD_PRELOAD", "") and dry["NVSHARE_SOCK_PATH"] == str(tmp_path / "s.sock")
    assert "LD_PRELOAD" not in jobs.native_env(harness) or "libnvshare" not in jobs.native_env(harness)["LD_PRELOAD"]


# ----------------------------------------------------------------------------- statistics

def test_makespan_runs_from_the_common_start_to_the_last_end():
    results = [{"t_start": 10.1, "t_end": 14.0}, {"t_start": 10.0, "t_end": 15.5}]
    assert jobs.makespan(10.0, results) == pytest.approx(5.5)
    assert jobs.sequential_seconds(results) == pytest.approx(3.9 + 5.5)
    with pytest.raises(ValueError):
        jobs.makespan(0.0, [])


def _train_result(step_s: list[float], loss: float = 0.25, ok: bool = True, pid: int = 1) -> dict:
    return {"pid": pid, "t_start": 100.0, "t_end": 100.0 + sum(step_s), "late_ms": 0.01,
            "steps": len(step_s), "step_s": step_s, "final_loss": loss,
            "resident": {"ok": ok, "min": 0.5, "max": 0.5 if ok else 0.7}}


def test_summary_keeps_the_slow_steps_where_switches_happened():
    steps = [0.01] * 50
    steps[10], steps[30] = 0.2, 0.05
    s = jobs.summarise_train(_train_result(steps))
    assert s["steps"] == 50 and s["seconds"] == pytest.approx(sum(steps))
    assert s["median_step_ms"] == pytest.approx(10.0)
    assert s["slow_steps"] == [[10, 200.0], [30, 50.0]]
    assert s["max_step_ms"] == pytest.approx(200.0)


def test_correctness_needs_one_final_loss_and_a_uniform_working_set():
    same = [jobs.summarise_train(_train_result([0.01] * 5, pid=p)) for p in (1, 2)]
    assert jobs.correctness(same)["ok"]
    other_loss = same + [jobs.summarise_train(_train_result([0.01] * 5, loss=0.3, pid=3))]
    assert not jobs.correctness(other_loss)["ok"]
    stale = same + [jobs.summarise_train(_train_result([0.01] * 5, ok=False, pid=4))]
    verdict = jobs.correctness(stale)
    assert not verdict["ok"] and verdict["working_set_bad_pids"] == [4]
    # runs of different lengths: only the working set and finite losses count
    assert jobs.correctness(other_loss, same_work=False)["ok"]
    assert not jobs.correctness(stale, same_work=False)["ok"]
    diverged = [jobs.summarise_train(_train_result([0.01] * 5, loss=float("nan")))]
    assert not jobs.correctness(diverged, same_work=False)["ok"]
