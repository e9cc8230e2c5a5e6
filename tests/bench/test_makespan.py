"""CPU tests of bench/job_program.py, bench/jobs.py and bench/makespan.py: the job program's protocol and step loop, the
process group that drives jobs, statistics, the scheduler log, the GPU memory rules, the plans, the
result tables, and a dry run of makespan_fit and makespan_pair with simulated jobs against a real scheduler."""

from __future__ import annotations

import io
import json
import math
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import gpu_memory  # noqa: E402
import job_program  # noqa: E402
import jobs  # noqa: E402
import schedlog  # noqa: E402
import makespan  # noqa: E402
from common import harness  # noqa: E402
from job_program import GIB, MIB  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


def ev(t: float, kind: str, pid: int, **fields: str) -> harness.Event:
    return harness.Event(t, kind, pid, dict(fields))


@pytest.fixture
def children_find_xpushare(monkeypatch):
    """The scheduler subprocess imports xpushare from the source tree."""
    paths = [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


# ----------------------------------------------------------------------------- the command protocol

def test_commands_round_trip_through_the_parser():
    for cmd in (job_program.train_command(12.5, steps=300), job_program.train_command(1.0, until=9.0),
                job_program.interactive_command(3.0, 2.0, 10), job_program.EXIT_COMMAND):
        assert job_program.parse_command(json.dumps(cmd)) == cmd


@pytest.mark.parametrize("line, why", [
    ("not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"cmd": "dance"}', "unknown command"),
    ('{"cmd": "train", "start": 1}', "either steps or until"),
    ('{"cmd": "train", "start": 1, "steps": 5, "until": 9}', "either steps or until"),
    ('{"cmd": "train", "start": 1, "steps": 0}', "steps"),
    ('{"cmd": "train", "start": 1, "steps": true}', "steps"),
    ('{"cmd": "train", "start": 1, "steps": 2.5}', "steps"),
    ('{"cmd": "train", "start": "soon", "steps": 5}', "start"),
    ('{"cmd": "train", "start": NaN, "steps": 5}', "start"),
    ('{"cmd": "interactive", "start": 1, "period": 0, "count": 3}', "period"),
    ('{"cmd": "interactive", "start": 1, "period": 2, "count": -1}', "count"),
])
def test_bad_commands_are_refused_with_the_reason(line, why):
    with pytest.raises(ValueError, match=why):
        job_program.parse_command(line)


def test_a_train_command_has_steps_or_until_never_both():
    with pytest.raises(ValueError):
        job_program.train_command(1.0)
    with pytest.raises(ValueError):
        job_program.train_command(1.0, steps=3, until=2.0)


def test_output_lines_are_read_by_their_prefix():
    assert job_program.parse_output_line('READY {"pid": 7}\n') == ("ready", {"pid": 7})
    assert job_program.parse_output_line('RESULT {"steps": 3}') == ("result", {"steps": 3})
    assert job_program.parse_output_line("a warning from PyTorch") is None
    assert job_program.parse_output_line("RESULT {broken") is None
    assert job_program.parse_output_line("RESULT [1]") is None


@pytest.mark.parametrize("argv", [["--width", "0"], ["--depth", "-1"], ["--resident-gib", "-1"],
                                  ["--simulate", "0"], ["--steps", "x"], ["--resident-gib", "nan"]])
def test_the_program_refuses_bad_flags_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as e:
        job_program.parse_args(argv)
    assert e.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_job_size_arguments_are_what_the_program_parses():
    size = jobs.JobSize(width=512, depth=3, batch=64, resident_gib=1.5)
    args = job_program.parse_args(size.args())
    assert (args.width, args.depth, args.batch, args.resident_gib) == (512, 3, 64, 1.5)


# ----------------------------------------------------------------------------- the program's loop

class CountingJob:
    """A job whose steps cost nothing: what the loop does with it is all there is to see."""

    def __init__(self) -> None:
        self.steps = 0
        self.syncs = 0
        self.resets = 0

    def step(self) -> None:
        self.steps += 1

    def sync(self) -> None:
        self.syncs += 1

    def final_loss(self) -> float:
        return 0.5

    def reset(self) -> None:
        self.resets += 1

    def check_resident(self) -> dict:
        return {"ok": True, "min": 1.0, "max": 1.0}


def test_train_runs_exactly_n_steps_each_synchronised_and_times_add_up():
    job = CountingJob()
    result = job_program.run_train(job, job_program.train_command(0.0, steps=25))
    assert result["steps"] == job.steps == 25
    assert job.syncs >= 25
    assert len(result["step_s"]) == 25
    assert sum(result["step_s"]) == pytest.approx(result["t_end"] - result["t_start"], abs=1e-4)
    assert result["final_loss"] == 0.5 and result["resident"]["ok"]


def test_train_until_an_instant_stops_at_the_first_step_past_it():
    import time

    job = job_program.SimulatedJob(step_ms=2.0)
    start = time.monotonic()
    result = job_program.run_train(job, job_program.train_command(start, until=start + 0.05))
    assert result["t_end"] >= start + 0.05
    assert result["t_end"] - sum(result["step_s"][-1:]) < start + 0.05  # the step before had not reached it
    assert result["steps"] == job.index


def test_train_waits_for_its_start_instant():
    import time

    start = time.monotonic() + 0.1
    result = job_program.run_train(CountingJob(), job_program.train_command(start, steps=1))
    assert result["t_start"] >= start
    assert result["late_ms"] >= 0


def test_interactive_steps_happen_once_per_period_from_the_start():
    import time

    start = time.monotonic() + 0.02
    result = job_program.run_interactive(CountingJob(), job_program.interactive_command(start, 0.03, 4))
    assert [s["planned"] for s in result["steps"]] == pytest.approx([start + k * 0.03 for k in range(4)])
    assert all(s["t0"] >= s["planned"] and s["t1"] >= s["t0"] for s in result["steps"])


def test_serve_answers_each_command_resets_after_each_and_stops_at_exit():
    job = CountingJob()
    lines = [json.dumps(job_program.train_command(0.0, steps=3)), "", json.dumps(job_program.train_command(0.0, steps=2)),
             json.dumps(job_program.EXIT_COMMAND), json.dumps(job_program.train_command(0.0, steps=50))]
    out = io.StringIO()
    job_program.serve(job, lines, out)
    results = [job_program.parse_output_line(line) for line in out.getvalue().splitlines()]
    assert [(kind, r["steps"]) for kind, r in results] == [("result", 3), ("result", 2)]
    assert job.resets == 2
    assert job.steps == 5  # nothing after "exit"


def test_serve_ends_at_the_end_of_input_and_refuses_a_bad_command():
    out = io.StringIO()
    job_program.serve(CountingJob(), [json.dumps(job_program.train_command(0.0, steps=1))], out)
    assert out.getvalue().startswith(job_program.RESULT)
    with pytest.raises(ValueError):
        job_program.serve(CountingJob(), ['{"cmd": "fly"}'], io.StringIO())


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


# ----------------------------------------------------------------------------- the scheduler's log

@pytest.mark.parametrize("text, seconds", [("12.3ms", 0.0123), ("1.23s", 1.23), ("170us", 170e-6),
                                           ("0.0ms", 0.0), ("5s", 5.0)])
def test_durations_of_the_log(text, seconds):
    assert schedlog.duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", None, "none", "12", "ms", "1.2min"])
def test_what_is_not_a_duration(text):
    assert schedlog.duration_s(text) is None


def test_switches_pair_each_drop_with_the_release_that_answered_it():
    events = [
        ev(0.5, "grant", 1, quantum="5s", prefetch="no"),
        ev(1.0, "drop", 1, reason="quantum", evict="yes"),
        ev(1.0, "drop", 9, reason="quantum", evict="yes"),  # another pid
        ev(1.25, "release", 1, reason="dropped", held="5.00s", drain="10.0ms", evict="200.0ms", prefetch="0.0ms"),
        ev(1.3, "grant", 2, quantum="5s", prefetch="yes"),
        ev(6.3, "drop", 2, reason="quantum", evict="yes"),
        ev(6.5, "release", 2, reason="dropped", held="5.00s", drain="5.0ms", evict="150.0ms", prefetch="120.0ms"),
        ev(7.0, "drop", 1, reason="quantum", evict="yes"),  # after the window
    ]
    found = schedlog.switches(events, [1, 2], 0.0, 6.9)
    assert [(s["pid"], s["reason"], s["evict"]) for s in found] == [(1, "quantum", True), (2, "quantum", True)]
    assert found[0]["handoff_ms"] == pytest.approx(250.0)
    assert found[0]["evict_ms"] == pytest.approx(200.0) and found[0]["drain_ms"] == pytest.approx(10.0)
    assert found[1]["prefetch_ms"] == pytest.approx(120.0)
    totals = schedlog.switch_totals(found, schedlog.releases(events, [1, 2], 0.0, 6.9))
    assert totals["count"] == 2 and totals["evicting"] == 2 and totals["reasons"] == ["quantum"]
    assert totals["evict_ms"] == pytest.approx(175.0)
    assert totals["prefetches"] == 1 and totals["prefetch_ms"] == pytest.approx(120.0)
    assert [g["prefetch"] for g in schedlog.grants(events, [1, 2], 0.0, 6.9)] == [False, True]


def test_a_drop_not_yet_answered_has_no_handoff():
    found = schedlog.switches([ev(1.0, "drop", 1, reason="preempted", evict="no")], [1], 0.0, 2.0)
    assert found[0]["handoff_ms"] is None and found[0]["evict"] is False
    assert schedlog.switch_totals(found, [])["handoff_ms"] is None


def test_switches_counted_from_real_scheduler_log_lines():
    """The harness's parser and ours agree on the scheduler's own log format."""
    lines = ["2026-01-01 00:00:00,000 nvshare-scheduler INFO drop pid=41 gpu=GPU-1 reason=quantum evict=yes",
             "2026-01-01 00:00:00,100 nvshare-scheduler INFO release pid=41 gpu=GPU-1 reason=dropped "
             "held=5.00s drain=12.3ms evict=170.0ms prefetch=0.0ms"]
    events = []
    for t, line in enumerate(lines):
        m = harness.EVENT_RE.search(line)
        events.append(harness.Event(float(t), m.group(1), int(m.group(2)),
                                    dict(__import__("re").findall(r"(\w+)=(\S+)", m.group(3)))))
    found = schedlog.switches(events, [41], 0.0, 5.0)
    assert len(found) == 1 and found[0]["evict_ms"] == pytest.approx(170.0)
    assert found[0]["drain_ms"] == pytest.approx(12.3)


# ----------------------------------------------------------------------------- GPU memory rules

def test_safety_refuses_a_busy_gpu_and_too_much_under_the_library():
    for mem, strict, refused in (((40_000, 81_559), False, True), ((60_000, 81_559), False, False),
                                 (None, False, False), (None, True, True), ((60_000, 81_559), True, False)):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(harness, "gpu_memory_mib", lambda: mem)
            assert (common.gpu_problem(strict) is not None) == refused
    assert gpu_memory.library_total_problem([12 * GIB, 12 * GIB]) is None
    assert "24" in gpu_memory.library_total_problem([12 * GIB, 12 * GIB + 1])


def test_the_default_sizes_stay_within_the_safety_limit():
    assert gpu_memory.library_total_problem([makespan.FIT_SIZE.footprint_estimate()] * 4) is None
    assert gpu_memory.library_total_problem([makespan.PAIR_SIZE.footprint_estimate()] * 2) is None


def test_footprint_estimate_holds_the_working_set_and_grows_with_the_model():
    small = jobs.JobSize(width=256, depth=2, batch=32, resident_gib=0.0)
    assert small.footprint_estimate() < jobs.JobSize(width=2048, depth=2, batch=32).footprint_estimate()
    with_set = jobs.JobSize(width=256, depth=2, batch=32, resident_gib=6.0)
    assert with_set.footprint_estimate() - small.footprint_estimate() == 6 * GIB


def test_separating_capacity_holds_one_job_but_not_two():
    for sizes in ([6 * GIB, 6 * GIB], [6 * GIB + 300 * MIB, 1 * GIB], [8 * GIB, 7 * GIB]):
        capacity = gpu_memory.separating_capacity(sizes)
        assert capacity % (64 * MIB) == 0
        assert gpu_memory.separates(sizes, gpu_memory.budget_of(capacity))
        assert not gpu_memory.separates(sizes, gpu_memory.budget_of(capacity * 2))  # both fit: no separation
    with pytest.raises(ValueError):
        gpu_memory.separating_capacity([GIB])


def test_admission_counts_each_client_with_its_context():
    budget = gpu_memory.budget_of(16 * GIB)
    assert budget == 16 * GIB - round(16 * GIB * 0.05)
    assert gpu_memory.fits_together([1 * GIB] * 4, budget)
    assert gpu_memory.fits_together([3 * GIB] * 4, budget)  # 4 x 3.75 GiB counted: 15 of 15.2
    assert not gpu_memory.fits_together([3 * GIB + 256 * MIB] * 4, budget)  # 4 x 4 GiB
    assert gpu_memory.budget_of(10 * GIB, reserve=GIB) == 9 * GIB


def _status(footprints: dict[int, int], budget: int | None = None) -> dict:
    return {"ok": True,
            "gpus": [{"uuid": "GPU-x", "budget": budget, "capacity": 0}],
            "clients": [{"pid": pid, "gpus": [{"uuid": "GPU-x", "managed_bytes": b, "other_bytes": 0}]}
                        for pid, b in footprints.items()]}


def test_footprints_are_read_from_the_status_of_the_scheduler():
    status = _status({5: 3 * GIB, 6: 2 * GIB, 7: GIB}, budget=9 * GIB)
    assert gpu_memory.footprints_in(status, [5, 6]) == {5: {"bytes": 3 * GIB, "gpu": "GPU-x"},
                                                  6: {"bytes": 2 * GIB, "gpu": "GPU-x"}}
    assert gpu_memory.gpu_budget(status, "GPU-x") == 9 * GIB
    assert gpu_memory.footprints_in(None, [5]) == {}


def test_ensure_separating_sets_a_capacity_when_the_estimate_was_wrong(monkeypatch):
    sent = []
    monkeypatch.setattr(gpu_memory, "scheduler_status", lambda sock: _status({5: 6 * GIB, 6: 6 * GIB}))
    monkeypatch.setattr(gpu_memory, "control", lambda sock, op, **f: sent.append((op, f)) or {"ok": True})
    check = gpu_memory.ensure_separating(Path("/x"), [5, 6], 20 * GIB, "test")  # 20 GiB holds both
    assert sent and sent[0][0] == "set_gpu_memory" and sent[0][1]["gpu"] == "GPU-x"
    assert check["separates"] and check["adjusted_from"] == 20 * GIB
    assert check["capacity"] == sent[0][1]["bytes"] == gpu_memory.separating_capacity([6 * GIB, 6 * GIB])
    sent.clear()
    good = gpu_memory.ensure_separating(Path("/x"), [5, 6], check["capacity"], "test")
    assert good["separates"] and not sent


def test_ensure_separating_leaves_the_capacity_without_footprints(monkeypatch):
    monkeypatch.setattr(gpu_memory, "scheduler_status", lambda sock: None)
    check = gpu_memory.ensure_separating(Path("/x"), [5, 6], 11 * GIB, "test")
    assert check["capacity"] == 11 * GIB and "note" in check


# ----------------------------------------------------------------------------- plans

def test_plans_fit_their_budgets():
    assert makespan.plan_fitting(False, None).estimate_s() <= 120
    assert makespan.plan_fitting(True, None).estimate_s() <= 65
    assert makespan.plan_pair(False, None).estimate_s() <= 130
    assert makespan.plan_pair(True, None).estimate_s() <= 80


def test_plans_shrink_to_the_time_left_and_refuse_when_nothing_fits():
    full = makespan.plan_fitting(False, None)
    assert full.counts == (2, 4) and full.reps == 2
    short = makespan.plan_fitting(False, full.estimate_s() - 1)
    assert short.estimate_s() <= full.estimate_s() - 1 and short.notes
    quick = makespan.plan_fitting(True, None)
    assert quick.reps == 1 and quick.alone_s < full.alone_s
    with pytest.raises(RuntimeError, match="not enough time"):
        makespan.plan_fitting(False, 5)
    pair_quick = makespan.plan_pair(True, None)
    assert pair_quick.tqs == (5,)
    assert makespan.plan_pair(False, None).tqs == (5, 30)
    with pytest.raises(RuntimeError, match="not enough time"):
        makespan.plan_pair(True, 10)


def test_pair_jobs_do_not_end_on_a_quantum_boundary():
    for quick in (False, True):
        plan = makespan.plan_pair(quick, None)
        for tq in plan.tqs:
            fraction = (plan.alone_s / tq) % 1
            assert 0.1 < fraction < 0.9 or plan.alone_s < tq


def test_steps_for_a_time_alone():
    assert makespan.steps_for(4.5, 0.0015) == 3000
    assert makespan.steps_for(0.01, 0.5) == 10
    with pytest.raises(ValueError):
        makespan.steps_for(4.5, 0.0)


# ----------------------------------------------------------------------------- result tables

def _summary(seconds: float, pid: int = 1) -> dict:
    return jobs.summarise_train({"pid": pid, "t_start": 0.0, "t_end": seconds, "steps": 2,
                                 "step_s": [seconds / 2] * 2, "final_loss": 0.25, "resident": {"ok": True}})


def _round(way: str, count: int, rep: int, makespan_s: float) -> dict:
    return {"way": way, "count": count, "rep": rep, "makespan_s": makespan_s,
            "jobs": [_summary(makespan_s, pid=i) for i in range(count)]}


def test_fitting_table_compares_auto_with_concurrent_and_sequential():
    plan = makespan.FittingPlan(counts=(2, 4), reps=2)
    alone = [_summary(4.0), _summary(5.0), _summary(4.0), _summary(5.0)]
    rounds = [_round("concurrent", 2, 0, 5.0), _round("auto", 2, 0, 5.05), _round("auto", 2, 1, 5.15),
              _round("concurrent", 2, 1, 5.0), _round("concurrent", 4, 0, 8.0), _round("auto", 4, 0, 9.0)]
    table = makespan.fitting_results(plan, 100, alone, rounds)
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
    plan = makespan.FittingPlan(counts=(2,), reps=1)
    table = makespan.fitting_results(plan, 10, [_summary(1.0), _summary(1.0)], [_round("concurrent", 2, 0, 1.2)])
    assert table["jobs"][2]["auto"] is None and table["jobs"][2]["auto_vs_concurrent"] is None
    assert table["jobs"][2]["met"] is None


def _pair_round(variant: str, tq: int, makespan_s: float, switches: int) -> dict:
    record = _round("pair", 2, 0, makespan_s)
    record.update(variant=variant, tq=tq, switch={"count": switches})
    return record


def test_pair_table_against_one_after_the_other():
    plan = makespan.PairPlan(tqs=(5, 30))
    alone = [_summary(7.5), _summary(7.5)]
    rounds = [_pair_round("fast", 5, 16.0, 2), _pair_round("demand", 5, 19.5, 2),
              _pair_round("fast", 30, 15.3, 0), _pair_round("demand", 30, 15.4, 0)]
    table = makespan.pair_results(plan, 100, alone, rounds)["tq"]
    five, thirty = table[5], table[30]
    assert five["sequential"] == pytest.approx(15.0)
    assert five["fast_vs_sequential"] == pytest.approx(16.0 / 15.0) and five["met"] is True
    assert five["demand_vs_sequential"] == pytest.approx(1.3)
    assert five["switches"] == 2 and five["switches_demand"] == 2 and "note" not in five
    assert thirty["switches"] == 0 and "no switch" in thirty["note"]


def test_pair_table_with_a_skipped_variant():
    plan = makespan.PairPlan(tqs=(5, 30))
    table = makespan.pair_results(plan, 100, [_summary(7.5), _summary(7.5)],
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
    monkeypatch.setattr(makespan, "run_fitting", lambda quick, left, **kw: called.append(("fitting", kw)) or {})
    monkeypatch.setattr(makespan, "run_pair", lambda quick, left, **kw: called.append(("pair", kw)) or {})
    out = tmp_path / "out.json"
    assert makespan.main([*argv, "--json", str(out)]) == 0
    assert [name for name, _ in called] == expected
    assert set(json.loads(out.read_text())) == set(expected)
    if "--jobs" in argv:
        assert called[0][1]["counts"] == tuple(sorted(int(v) for v in argv[1].split(",")))


def test_run_records_a_failing_half_and_still_runs_the_other(monkeypatch):
    def broken(quick, left):
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(makespan, "run_fitting", broken)
    monkeypatch.setattr(makespan, "run_pair", lambda quick, left: {"tq": {}})
    out = makespan.run(True, 100.0)
    assert "no GPU here" in out["fitting"]["error"] and out["pair"] == {"tq": {}}


# ----------------------------------------------------------------------------- dry runs

@pytest.mark.timeout(180)
def test_dry_run_of_fitting_jobs(children_find_xpushare):
    plan = makespan.FittingPlan(counts=(2, 3), reps=1, steps=15)
    result = makespan.measure_fitting(None, plan, jobs.Deadline(None), simulate_ms=2.0, mode="off",
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
    plan = makespan.PairPlan(tqs=(5, 30), steps=10, capacity=12 * GIB)
    result = makespan.measure_pair(None, plan, jobs.Deadline(None), simulate_ms=2.0, mode="off",
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
