#!/usr/bin/env python3
"""Render the suite's results (bench/results/suite.json) as docs/benchmarks.md and PNG plots.

    python3 -m bench.core.report bench/results/suite.json [--md docs/benchmarks.md] [--plots DIR] [--no-plots]

bench/run_all.py calls write() after every benchmark; this command re-renders the same from the JSON
alone, on any machine (no GPU, no PyTorch; matplotlib only for the plots, which are skipped, and the
report says so, when it cannot be imported). The report only assembles: each benchmark module (see
bench/core/suite.py) gives its goal rows, its section and its plots.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import ModuleType

from bench.core import suite
from bench.core.render import GOAL_HEAD, error_of, f, num, params_text

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / "bench" / "results" / "suite.json"
DEFAULT_MD = REPO / "docs" / "benchmarks.md"
DEFAULT_RERUN_ALL = "bash bench/gpu_validate.sh --bench-only   # or: python3 -m bench.run_all"
# Results of other runs shown after the suite's, when they are next to its JSON: file -> what it holds.
EARLIER = {"launch-training-idle.json": "the full forms of launch overhead, training step time (three sizes) "
                                        "and idle release",
           "busy-accuracy.json": "per-client GPU busy time against the application's own timing",
           "quota-limits.json": "compute limits and shares",
           "gang-ddp.json": "gang-scheduled torchrun DDP jobs",
           "gang-ddp-nccl.json": "gang-scheduled torchrun DDP jobs on two GPUs (NCCL)"}
# Runs of the benchmarks without a GPU (suite.CPU), next to the suite's JSON: file -> their part's title.
SEPARATE = {"cpu.json": "Without a GPU: many clients and soak"}
# Facts measured once outside the suite, which defaults and design rest on: shown last.
FACTS = "facts.json"


def _goal_rows(bench: ModuleType, results: dict) -> list[str]:
    goals = getattr(bench, "goals", None)
    return goals(results.get(bench.NAME)) if goals else []


def headline(results: dict) -> str:
    rows = [row for bench in suite.modules(suite.GOALS) for row in _goal_rows(bench, results)]
    other = _other_rows(results)
    parts = ["## Headline: goals\n", *GOAL_HEAD, *rows, ""]
    if other:
        parts += ["Other measurements of the suite:\n", *GOAL_HEAD, *other, ""]
    return "\n".join(parts)


def _other_rows(results: dict) -> list[str]:
    return [row for bench in suite.modules(suite.OTHER) if bench.NAME in results
            for row in _goal_rows(bench, results)]


def _timing(s: dict) -> str | None:
    timing = []
    if num(s.get("seconds")) is not None:
        timing.append(f"took {s['seconds']:.0f} s")
    if num(s.get("time_left_s")) is not None:
        timing.append(f"of {s['time_left_s']:.0f} s given")
    if s.get("quick"):
        timing.append("quick form")
    return f"({', '.join(timing)})\n" if timing else None


def section(bench: ModuleType, s, plots: dict[str, Path], md_dir: Path, level: str = "##") -> str:
    parts = [f"{level} {bench.TITLE}\n"]
    if not isinstance(s, dict):
        return parts[0] + f"Not measured: `{error_of(s)}`\n"
    timing = _timing(s)
    if timing:
        parts.append(timing)
    err = error_of(s)
    if err:
        parts.append(f"Not measured: `{err}` (details in the JSON).\n")
    else:
        try:
            parts.append(bench.section(s))
        except Exception as e:  # a result of an unexpected shape: say so, keep the rest of the report
            parts.append(f"Cannot render this result ({type(e).__name__}: {e}); the raw numbers are in the JSON.\n")
        for name, title in getattr(bench, "PLOTS", {}).items():
            if name in plots:
                parts.append(f"![{title}]({os.path.relpath(plots[name], md_dir)})\n")
        text = params_text(s)
        if text:
            parts.append(text)
    parts.append(f"Rerun: `{s.get('rerun') or bench.RERUN}`\n")
    return "\n".join(parts)


def _machine_lines(m: dict) -> list[str]:
    """The GPU and software lines; a run on a machine without a GPU names its CPU instead."""
    if m.get("gpu") or not m.get("cpu"):
        lines = [f"- GPU: {m.get('gpu') or 'unknown'} (name, driver, memory)"]
        if m.get("cpu"):
            lines.append(f"- CPU: {m['cpu']}")
        return lines + [f"- PyTorch {m.get('torch')} (CUDA {m.get('torch_cuda')}), Python {m.get('python')}, "
                        f"nvcc: {m.get('nvcc')}"]
    return [f"- Machine: {m['cpu']}, no GPU", f"- Python {m.get('python')}"]


def _run_lines(results: dict, json_name: str) -> list[str]:
    m = results.get("machine") or {}
    quick = " (--quick: fewer repetitions)" if results.get("quick") else ""
    budget = (f"- Budget: {f(results.get('budget_s'), 0)} s, took {f(results.get('seconds'), 0)} s"
              if "budget_s" in results else None)
    lines = [
        *_machine_lines(m),
        f"- Date: {m.get('date')}; commit {m.get('commit')}{quick}",
        budget,
        f"- Rerun: `{results.get('rerun') or DEFAULT_RERUN_ALL}`",
        f"- Raw results: {json_name}\n",
    ]
    return [line for line in lines if line is not None]


def separate_part(results: dict, title: str, json_name: str, md_dir: Path) -> str:
    """A run of the benchmarks without a GPU: its machine, its goal rows and its sections."""
    parts = [f"## {title}\n", *_run_lines(results, json_name)]
    rows = [row for bench in suite.modules(suite.CPU) if bench.NAME in results for row in _goal_rows(bench, results)]
    if rows:
        parts += [*GOAL_HEAD, *rows, ""]
    for bench in suite.modules(suite.CPU):
        if bench.NAME in results:
            parts.append(section(bench, results[bench.NAME], {}, md_dir, level="###"))
    return "\n".join(parts)


def earlier_part(results: dict, what: str, json_name: str, md_dir: Path) -> str:
    """Another run's results (not the suite's): its machine, goal rows and sections."""
    parts = [f"## Earlier run: {what}\n", *_run_lines(results, json_name)]
    rows = _other_rows(results)
    if rows:
        parts += [*GOAL_HEAD, *rows, ""]
    for bench in suite.modules():
        if bench.NAME in results:
            parts.append(section(bench, results[bench.NAME], {}, md_dir, level="###"))
    return "\n".join(parts)


def render(results: dict, plots: dict[str, Path] | None = None, plot_note: str | None = None,
           md_path: Path = DEFAULT_MD, json_name: str = "bench/results/suite.json",
           earlier: list[tuple[str, dict, str]] | None = None, facts: dict | None = None,
           separate: list[tuple[str, dict, str]] | None = None) -> str:
    """The Markdown of the suite's results, then of the `separate` runs without a GPU and of `earlier`
    runs: (title or what, results, JSON shown), then the `facts` measured outside the suite."""
    plots = plots or {}
    parts = [
        "# Benchmarks\n",
        "Written by `bench/run_all.py` (re-rendered from the JSON by `python3 -m bench.core.report "
        f"{json_name}`). Every figure is a ratio to its baseline measured in the same run.\n",
        *_run_lines(results, json_name),
    ]
    if plot_note:
        parts.append(f"Plots: {plot_note}\n")
    parts.append(headline(results))
    for bench in suite.modules():
        if bench.NAME in results and bench.NAME not in suite.CPU:
            parts.append(section(bench, results[bench.NAME], plots, md_path.parent))
    for title, other, name in separate or []:
        parts.append(separate_part(other, title, name, md_path.parent))
    for what, other, name in earlier or []:
        parts.append(earlier_part(other, what, name, md_path.parent))
    if facts:
        parts.append(facts_part(facts, json_name))
    return "\n".join(parts)


def facts_part(facts: dict, json_name: str) -> str:
    """The table of facts measured outside the suite (bench/results/facts.json)."""
    shown = str(Path(json_name).with_name(FACTS))
    lines = [f"## {facts.get('title', 'Measured facts')}\n", f"{facts.get('note', '')} Source: `{shown}`.\n",
             "| what | measured | where, when | what depends on it |", "|---|---|---|---|"]
    for fact in facts.get("facts", []):
        lines.append("| " + " | ".join(str(fact.get(k, "")) for k in ("what", "measured", "where", "used_by")) + " |")
    return "\n".join(lines) + "\n"


def read_facts(directory: Path) -> dict | None:
    try:
        facts = json.loads((directory / FACTS).read_text())
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def read(path: Path) -> dict | None:
    """A results file, or None when it is missing, unreadable or not an object."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def earlier_runs(directory: Path, files: dict[str, str] = EARLIER) -> list[tuple[str, dict, str]]:
    """The results of `files` (EARLIER, or SEPARATE) found in `directory` (unreadable ones are left out)."""
    found = []
    for name, what in files.items():
        results = read(directory / name)
        if results is not None:
            found.append((what, results, _shown(directory / name)))
    return found


def plots(results: dict, outdir: Path) -> tuple[dict[str, Path], str | None]:
    """Write the PNG plots; ({file name: path}, None) or ({}, why there are none)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return {}, f"none: matplotlib cannot be imported here ({e}); rerun `python3 -m bench.core.report` where it can"
    outdir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    problems = []
    for bench in suite.modules():
        s = results.get(bench.NAME)
        if not hasattr(bench, "plot") or error_of(s):
            continue
        try:
            figures = bench.plot(s, plt)
        except Exception as e:  # a plot must never cost the report
            problems.append(f"{bench.NAME}: {type(e).__name__}: {e}")
            plt.close("all")
            continue
        for name, fig in figures.items():
            if fig is None:
                continue
            try:
                fig.savefig(outdir / name, dpi=110, bbox_inches="tight")
                made[name] = outdir / name
            except Exception as e:
                problems.append(f"{name}: {type(e).__name__}: {e}")
            finally:
                plt.close(fig)
    return made, ("; ".join(problems) if problems else None)


def plot_files(directory: Path) -> list[Path]:
    """The plots the benchmarks draw, where they are in `directory`."""
    names = [name for bench in suite.modules() for name in getattr(bench, "PLOTS", {})]
    return [directory / name for name in names if (directory / name).exists()]


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def write(results: dict, md_path: Path = DEFAULT_MD, plot_dir: Path | None = None, make_plots: bool = True,
          no_plots_note: str = "not drawn (--no-plots)", json_path: Path = DEFAULT_JSON) -> Path:
    """Plots (when asked and possible), then the Markdown; returns the Markdown's path."""
    made, note = ({}, no_plots_note) if not make_plots else plots(results, plot_dir or json_path.parent)
    if made and note:
        note = f"some could not be drawn: {note}"
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(render(results, made, note, md_path, _shown(json_path), earlier_runs(json_path.parent),
                              read_facts(json_path.parent), earlier_runs(json_path.parent, SEPARATE)))
    return md_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", type=Path, nargs="?", default=DEFAULT_JSON,
                   help="results (default bench/results/suite.json)")
    p.add_argument("--md", type=Path, default=DEFAULT_MD, help="Markdown to write (default docs/benchmarks.md)")
    p.add_argument("--plots", type=Path, help="directory for the PNG plots (default: the JSON's directory)")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    try:
        results = json.loads(args.json.read_text())
    except (OSError, ValueError) as e:
        print(f"report: cannot read {args.json}: {e}", file=sys.stderr)
        return 1
    if not isinstance(results, dict):
        print(f"report: {args.json} does not hold a results object", file=sys.stderr)
        return 1
    path = write(results, args.md, args.plots or args.json.parent, not args.no_plots, json_path=args.json)
    print(f"report: wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
