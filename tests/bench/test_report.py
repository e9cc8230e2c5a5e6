"""bench/core/report.py: the headline table, the sections, error rows, plots and the re-render command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.core import render
from bench.core import report
from bench.core import suite
from tests.bench.sample_results import sample


def headline_line(md: str, start: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {start}"))


def test_headline_judges_each_goal():
    md = report.render(sample())
    assert "| 2 jobs" in md and "**1.011x**" in headline_line(md, "2 jobs")
    assert headline_line(md, "2 jobs").endswith("**yes** |")
    assert headline_line(md, "4 jobs").endswith("**no** |")       # 1.05 > 1.02
    pair = headline_line(md, "two jobs that do not fit, TQ 5 s")
    assert "**1.077x**" in pair and pair.endswith("**yes** |")       # 1.077 <= 1.10
    d1 = headline_line(md, "switch back of 1 GiB")
    assert "**1.25x**" in d1 and "NVSHARE_PREFETCH=wait" in d1 and "20.0 ms (pinned" in d1
    assert "demand faults: 230.0 ms, 9.2x" in d1 and d1.endswith("**yes** |")
    d8 = headline_line(md, "switch back of 8 GiB")
    assert "NVSHARE_PREFETCH=overlap" in d8                         # the faster bulk variant is named
    g = headline_line(md, "interactive client")
    assert "p99 − switch = **80.0 ms**" in g and g.endswith("**yes** |")  # 290 < 210 + 100


def test_goals_come_first_then_the_other_measurements():
    md = report.render(sample())
    assert md.index("## Headline") < md.index("| 2 jobs") < md.index("| uncontended") \
        < md.index("## Resident training step time")
    assert "| added cost per kernel launch" in md
    assert "| resident training step, large" in md


def test_missed_goals_say_no():
    results = sample()
    results["makespan_pair"]["tq"][5]["fast_vs_sequential"] = 1.5
    results["interactive"]["wait_ms"]["p99"] = 400.0
    results["switch_cost"]["headline"]["1"].update(bulk_vs_copy=1.4, goal_met=False)
    md = report.render(results)
    for start in ("two jobs that do not fit, TQ 5 s", "interactive client", "switch back of 1 GiB"):
        assert headline_line(md, start).endswith("**no** |"), start


def test_failed_and_missing_benchmarks_get_error_rows_and_the_rest_renders():
    results = sample()
    results["makespan_fit"] = {"error": "RuntimeError: job 3 died\ntraceback..."}
    del results["interactive"]
    results["makespan_pair"] = {"tq": {30: {"fast": 1.0}}}  # no TQ 5 s
    results["switch_cost"]["variants"]["off"] = {"error": "TimeoutError: A did not start"}
    md = report.render(results)
    assert "not measured: `RuntimeError: job 3 died`" in headline_line(md, "jobs that fit")
    assert "not measured: `not run`" in headline_line(md, "interactive p99 wait")
    assert "not measured: `no TQ 5 s in the result`" in md
    assert "## Jobs that fit" in md and "Not measured: `RuntimeError: job 3 died`" in md
    assert "| 1 | off | not measured: `TimeoutError: A did not start`" in md
    assert "## Lock round trip" in md                           # the others still render


def test_missing_keys_render_as_dashes_not_exceptions():
    results = sample()
    results["interactive"] = {"wait_ms": {}, "unexpected": [1, 2]}
    results["makespan_fit"] = {"jobs": {2: {"auto": None}}}
    results["sched_latency"] = {"uncontended": {}}
    md = report.render(results)
    assert "| 2 jobs" in md and "—" in headline_line(md, "2 jobs")
    assert "p99 − switch = **— ms**" in md


def test_json_round_trip_turns_integer_keys_into_strings_and_renders_the_same():
    results = sample()
    assert report.render(json.loads(json.dumps(results))) == report.render(results)


def test_machine_and_rerun_lines():
    md = report.render(sample())
    assert "- GPU: NVIDIA H100 80GB HBM3" in md
    assert "commit abc1234" in md
    assert "Rerun: `python3 -m bench.scheduling.sched_latency`" in md          # the section's own command


def test_helpers():
    assert render.num(float("nan")) is None and render.num(True) is None and render.num("1") is None
    assert render.dig({"a": {"2": 5}}, "a", 2) == 5 and render.dig({"a": 1}, "a", "b") is None
    assert [k for k, _ in render.numeric_items({"10": 0, "2": 0, "x": 0})] == ["2", "10", "x"]
    assert render.error_of(None) == "not run" and render.error_of({"error": "a\nb"}) == "a"


def test_plots_are_written_and_linked(tmp_path: Path):
    pytest.importorskip("matplotlib")
    md_path = tmp_path / "docs" / "benchmarks.md"
    report.write(sample(), md_path, tmp_path / "results")
    pngs = sorted(p.name for p in (tmp_path / "results").glob("*.png"))
    assert pngs == sorted(name for bench in suite.modules() for name in getattr(bench, "PLOTS", {}))
    md = md_path.read_text()
    assert "](../results/switch-cost.png)" in md
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in (tmp_path / "results").glob("*.png"))


def test_without_matplotlib_the_report_says_so(tmp_path: Path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    md_path = tmp_path / "benchmarks.md"
    report.write(sample(), md_path, tmp_path)
    assert "Plots: none: matplotlib cannot be imported" in md_path.read_text()
    assert not list(tmp_path.glob("*.png"))


def test_cli_rerenders_from_the_json(tmp_path: Path):
    src = tmp_path / "suite.json"
    src.write_text(json.dumps(sample()))
    md_path = tmp_path / "out.md"
    assert report.main([str(src), "--md", str(md_path), "--no-plots"]) == 0
    assert md_path.read_text().startswith("# Benchmarks")
    assert report.main([str(tmp_path / "missing.json"), "--md", str(md_path)]) == 1
    with pytest.raises(SystemExit) as e:
        report.main(["--bogus"])
    assert e.value.code == 2


def test_earlier_runs_next_to_the_json_are_shown_after_the_suite(tmp_path: Path):
    src = tmp_path / "suite.json"
    src.write_text(json.dumps(sample()))
    earlier = {"machine": {"gpu": "NVIDIA H200"}, "train_overhead": sample()["train_overhead"]}
    (tmp_path / next(iter(report.EARLIER))).write_text(json.dumps(earlier))
    md_path = tmp_path / "out.md"
    assert report.main([str(src), "--md", str(md_path), "--no-plots"]) == 0
    md = md_path.read_text()
    assert md.index("## Interactive client") < md.index("## Earlier run:") < md.index("### Resident training")
    assert "- GPU: NVIDIA H200" in md


def test_facts_measured_outside_the_suite_come_last_as_a_table(tmp_path: Path):
    src = tmp_path / "suite.json"
    src.write_text(json.dumps(sample()))
    facts = {"title": "Measured facts", "note": "Once.",
             "facts": [{"what": "context size", "measured": "747 MiB", "where": "H200",
                        "used_by": "NVSHARE_CONTEXT_RESERVE"}]}
    (tmp_path / report.FACTS).write_text(json.dumps(facts))
    md_path = tmp_path / "out.md"
    assert report.main([str(src), "--md", str(md_path), "--no-plots"]) == 0
    md = md_path.read_text()
    assert md.index("## Interactive client") < md.index("## Measured facts")
    assert "| context size | 747 MiB | H200 | NVSHARE_CONTEXT_RESERVE |" in md


def test_the_repository_facts_render(tmp_path: Path):
    facts = report.read_facts(Path(report.DEFAULT_JSON).parent)
    assert facts and facts["facts"], "bench/results/facts.json is missing or empty"
    assert all({"what", "measured", "where", "used_by"} <= set(f) for f in facts["facts"])
