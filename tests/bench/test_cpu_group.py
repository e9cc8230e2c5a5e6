"""The benchmarks without a GPU (bench/core/suite.py's CPU group): not in the default run, their own results
file, and their own part of docs/benchmarks.md beside the suite's results."""

from __future__ import annotations

import json
from pathlib import Path

from bench.core import report
from bench import run_all
from bench.core import suite
from tests.bench.sample_results import sample


def test_the_cpu_group_is_listed_but_not_run_by_default():
    assert set(suite.CPU) <= set(suite.SUITE)
    assert not set(suite.CPU) & {b.name for b in run_all.select(None)}
    assert [b.name for b in run_all.select("soak,load")] == list(suite.CPU)
    assert all(not run_all.BY_NAME[name].gpu for name in suite.CPU)


def test_a_cpu_run_writes_its_own_json_and_keeps_the_suite_as_the_main_part(tmp_path: Path):
    (tmp_path / "suite.json").write_text(json.dumps(sample()))
    cpu = {"machine": {"cpu": "Some CPU, 2 cores", "python": "3.11"}, "rerun": run_all.RERUN_CPU,
           "load": {"error": "boom"}, "soak": {"error": "bang"}}
    md_path = tmp_path / "benchmarks.md"
    run_all.write_outputs(cpu, None, tmp_path / "cpu.json", md_path, make_plots=False)
    assert json.loads((tmp_path / "cpu.json").read_text()) == cpu
    md = md_path.read_text()
    assert md.index("## Headline: goals") < md.index("## Interactive client") < md.index("## Without a GPU")
    part = md[md.index("## Without a GPU"):]
    assert "- Machine: Some CPU, 2 cores, no GPU" in part and "PyTorch" not in part
    assert "not measured: `boom`" in part and "not measured: `bang`" in part
    assert "### Soak" in part and "python3 -m bench.run_all --only load,soak" in part
    assert "- GPU:" in md[:md.index("## Headline")]                 # the suite's own machine


def test_the_report_alone_shows_the_cpu_part_next_to_the_suite(tmp_path: Path):
    (tmp_path / "suite.json").write_text(json.dumps(sample()))
    (tmp_path / "cpu.json").write_text(json.dumps({"machine": {"cpu": "X"}, "load": {"error": "e"}}))
    md_path = tmp_path / "out.md"
    assert report.main([str(tmp_path / "suite.json"), "--md", str(md_path), "--no-plots"]) == 0
    assert "## Without a GPU: many clients and soak" in md_path.read_text()
