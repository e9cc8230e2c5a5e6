"""CPU tests of bench/scheduling/job_program.py: the command protocol and the program's step loop."""

from __future__ import annotations

import io
import json

import pytest

from bench.scheduling import job_program
from bench.scheduling import jobs


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
