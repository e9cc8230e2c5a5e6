"""bench/run_all.py: selection, the shared budget, and running each benchmark isolated (errors, crashes
and hangs are recorded, the others still run, and what a benchmark started is ended)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bench import run_all
from testkit.waiting import poll
from bench.launch import train_overhead
from bench.run_all import Bench


SUITE = ["train_overhead", "launch_overhead", "sched_latency", "switch_cost", "makespan_fit", "makespan_pair",
         "interactive"]


def test_default_selection_is_the_suite_in_order():
    assert [b.name for b in run_all.select(None)] == SUITE


def test_only_accepts_names_and_keeps_suite_order():
    assert [b.name for b in run_all.select("switch_cost, train_overhead,sched_latency")] == \
        ["train_overhead", "sched_latency", "switch_cost"]
    assert [b.name for b in run_all.select("idle_release")] == ["idle_release"]
    assert [b.name for b in run_all.select("idle")] == ["idle_release"]
    with pytest.raises(ValueError, match="unknown benchmark"):
        run_all.select("train_overhead,zz")
    with pytest.raises(ValueError, match="unknown benchmark"):
        run_all.select("a")


def test_cli_rejects_bad_arguments():
    for argv in (["--only", "zz"], ["--budget", "-1"], ["--bogus"]):
        with pytest.raises(SystemExit) as e:
            run_all.main(argv)
        assert e.value.code == 2


def test_budget_is_shared_in_proportion_to_the_shares_of_what_is_left():
    benches = run_all.select(None)
    total = sum(b.share_s for b in benches)
    assert run_all.shares(benches, 470) == pytest.approx(470 * 60 / total)
    # The last one gets all that is left, whatever the earlier ones used.
    assert run_all.shares(benches[-1:], 33) == pytest.approx(33)
    assert sum(b.share_s for b in benches) == 495  # the brief's shares


def test_train_pairs_fit_the_time():
    assert train_overhead.train_reps(True, 100) == 2
    assert train_overhead.train_reps(False, 57) == 2
    assert train_overhead.train_reps(False, 80) == 3
    assert train_overhead.train_reps(False, 10) == 1


def fake(key: str, fn: str, share: float = 10, min_s: float = 0) -> Bench:
    return Bench(f"fake_{key}", share, min_s, False, f"tests.bench.fake_benches:{fn}")


@pytest.fixture
def suite(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(run_all, "machine", lambda: {"gpu": "none"})
    monkeypatch.setattr(run_all, "library", lambda: None)

    def run(benches: list[Bench], budget: float = 100, quick: bool = False) -> dict:
        json_path, md_path = tmp_path / "suite.json", tmp_path / "benchmarks.md"
        results = run_all.run_suite(benches, quick, budget, None, json_path, md_path, make_plots=False)
        assert json.loads(json_path.read_text()) == json.loads(json.dumps(results, default=str))
        assert md_path.read_text().startswith("# Benchmarks")
        return results
    return run


def test_each_benchmark_gets_its_share_and_failures_do_not_stop_the_others(suite):
    results = suite([fake("x", "fails"), fake("y", "crashes"), fake("z", "not_a_dict"), fake("w", "ok", share=30)],
                    budget=60, quick=True)
    assert "ValueError: broken on purpose" in results["fake_x"]["error"]
    assert "traceback" in results["fake_x"]
    assert "exit code 7" in results["fake_y"]["error"]
    assert "not a dict" in results["fake_z"]["error"]
    w = results["fake_w"]
    assert w["value"] == 1 and w["was_quick"] is True
    assert 25 < w["given"] <= 60  # most of the budget is left for the last one: all of it is its
    assert w["quick"] is True and w["time_left_s"] == pytest.approx(w["given"], abs=0.1)
    assert results["order"] == ["fake_x", "fake_y", "fake_z", "fake_w"]


def test_a_benchmark_without_enough_time_is_skipped(suite):
    results = suite([fake("x", "ok", share=10, min_s=50), fake("y", "ok", share=10)], budget=40)
    assert results["fake_x"]["error"].startswith("skipped")
    assert results["fake_y"]["value"] == 1


def test_a_hanging_benchmark_is_stopped_with_everything_it_started(suite, tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_BENCH_PIDFILE", str(pidfile))
    monkeypatch.setattr(run_all, "HANG_FACTOR", 1.0)
    monkeypatch.setattr(run_all, "HANG_EXTRA_S", 0.0)
    t0 = time.monotonic()
    results = suite([fake("h", "hangs", share=2), fake("o", "ok", share=2)], budget=4)
    assert time.monotonic() - t0 < 60
    assert "was stopped" in results["fake_h"]["error"]
    assert results["fake_o"]["value"] == 1
    pid = int(pidfile.read_text())
    poll(lambda: not _alive(pid), timeout=10, interval=0.05, what="the benchmark's own child to end")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_reap_ends_marked_processes_only(monkeypatch):
    import subprocess

    marked = subprocess.Popen(["sleep", "60"], env={**os.environ, run_all.MARKER: "t-1"})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, run_all.MARKER: "t-2"})
    try:
        assert run_all.marked_pids("t-1") == [marked.pid]
        assert run_all.reap("t-1", grace_s=2) == []
        assert marked.wait(5) is not None
        assert other.poll() is None
    finally:
        for p in (marked, other):
            p.kill()
            p.wait()


def test_sigterm_stops_the_running_benchmark_and_keeps_the_results(tmp_path: Path):
    """What gpu_validate.sh's timeout does: the suite ends the running benchmark and what it started,
    writes what it has and runs nothing more."""
    import subprocess
    import sys
    import textwrap

    pidfile = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import os, signal, sys, threading
        from pathlib import Path
        from bench import run_all
        from bench.run_all import Bench
        run_all.machine = lambda: {{}}
        run_all.library = lambda: None
        signal.signal(signal.SIGTERM, run_all._raise_stop)
        threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
        benches = [Bench("fake_h", 10, 0, False, "tests.bench.fake_benches:hangs"),
                   Bench("fake_o", 10, 0, False, "tests.bench.fake_benches:ok")]
        try:
            run_all.run_suite(benches, False, 100, None, Path({str(tmp_path / "r.json")!r}),
                              Path({str(tmp_path / "r.md")!r}), make_plots=False)
        except run_all._Stop:
            sys.exit(5)
    """)
    env = {**os.environ, "FAKE_BENCH_PIDFILE": str(pidfile)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["fake_h"]["error"].startswith("stopped")
    assert "fake_o" not in results
    pid = int(pidfile.read_text())
    poll(lambda: not _alive(pid), timeout=10, interval=0.05, what="the hanging benchmark's child to end")
