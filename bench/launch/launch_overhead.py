#!/usr/bin/env python3
"""Added cost per kernel launch under libnvshare.so.

Builds bench/launch/launch_overhead.cu with nvcc, then measures two ways (scheduler in mode `off`, so the
library holds the GPU lock and takes its fast path):

- paired, in one process (the headline): under the library, the program alternates short batches of
  launches through the library's cuLaunchKernel wrapper and through the driver's own function, on the
  same stream, and takes wrapper minus real per round; pooled over --paired-runs processes, the
  median and interquartile range over rounds. The same program run natively (both pointers are the
  driver's function) is an A/A control: its "difference" is the method's own bias and noise. One more
  process under the library with NVSHARE_MAX_INFLIGHT=0 (no checkpoints) gives the gate's share.
  Also cuLaunchKernelEx, and cuLaunchKernel(NULL, ...) rejected at once (the call path alone).
- end to end: the same binary run natively and under the library as separate processes, alternating,
  --reps times each; medians with their min-max over runs. Per-process noise on a VM is a few hundred
  ns per launch, so these rows cannot resolve tens of ns; they show that nothing larger happens on the
  paths the paired numbers do not cover (the CUDA runtime's <<<>>>):
  - driver/runtime submit: time inside cuLaunchKernel / <<<>>> only (the CPU cost a program pays);
  - driver/runtime total: with a stream synchronize per 100 launches (launch throughput);
  - null call: cuLaunchKernel(NULL, ...) rejected at once by the driver.

    python3 -m bench.launch.launch_overhead [--reps 8] [--paired-runs 4] [--json-out FILE]
                                            [--compare LABEL=PATH ...]

--compare measures another libnvshare.so (an older tree's, built the same way) in the same run:
--paired-runs paired processes under it, interleaved with this tree's, so that a change of the
library can be told from the machine's drift between runs (the driver's own time per launch moves
by a quarter from one machine to the next). --reps 0 leaves the end-to-end rows out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.core.common import BENCH, alternating, harness, require_safe_gpu
from bench.core.nvcc import build_driver_program
from bench.core.stats import median, percentile
from bench.core.render import dig, error_of, error_row, f, goal_row, num, signed

NAME = "launch_overhead"
TITLE = "Added cost per kernel launch"
SHARE, MIN_S, GPU = 40, 25, True
RERUN = "python3 -m bench.run_all --only launch_overhead"
GOAL_NS = 100.0  # added per kernel launch

METRICS = {  # name -> (mode, path in the program's JSON)
    "driver_submit_ns": ("launches", ("driver", "submit_ns")),
    "driver_total_ns": ("launches", ("driver", "total_ns")),
    "runtime_submit_ns": ("launches", ("runtime", "submit_ns")),
    "runtime_total_ns": ("launches", ("runtime", "total_ns")),
    "null_call_ns": ("null", ("call_ns",)),
}


def build(outdir: Path) -> Path:
    return build_driver_program(BENCH / "launch" / "launch_overhead.cu", outdir)


def run_binary(binary: Path, env: dict[str, str], mode: str, launches: int, null_calls: int) -> dict:
    r = harness.run([str(binary), "--mode", mode, "--launches", str(launches), "--null-calls", str(null_calls)],
                    env, timeout=300).check()
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- paired, in one process

def _json_lines(stdout: str) -> dict[str, dict]:
    """The program's JSON lines by their "mode"."""
    found = {}
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            obj = json.loads(line)
            found[obj.get("mode", "?")] = obj
    return found


def run_paired(binary: Path, env: dict[str, str], rounds: int, batch: int) -> tuple[dict, dict | None, str | None]:
    """One paired process: (launch line, NULL-call line or None, why the NULL phase is missing)."""
    r = harness.run([str(binary), "--mode", "paired", "--rounds", str(rounds), "--batch", str(batch)],
                    env, timeout=300)
    lines = _json_lines(r.stdout)
    if "paired" not in lines:
        raise AssertionError(f"paired run gave no result\n{r.describe()}")
    null = lines.get("paired-null")
    problem = None if null is not None else f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    return lines["paired"], null, problem


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return v, v, v
    return percentile(values, 25), percentile(values, 50), percentile(values, 75)


def pool(summaries: list[dict]) -> dict:
    """Pool the per-round differences of several processes (each a "submit"/"total" summary)."""
    deltas = [d for s in summaries for d in s["deltas"]]
    q1, med, q3 = _quartiles(deltas)
    return {
        "delta_ns": med, "delta_q1": q1, "delta_q3": q3, "rounds": len(deltas),
        "per_run_delta_ns": [s["delta_ns"] for s in summaries],
        "wrapper_ns": median([s["wrapper_ns"] for s in summaries]),
        "real_ns": median([s["real_ns"] for s in summaries]),
    }


def _summaries(runs: list[dict], function: str, measure: str) -> list[dict]:
    return [run[function]["series"][measure] for run in runs if run.get(function)]


def _interleave(counts: dict[str, int]) -> list[str]:
    """Round-robin over the sides, so that no side's runs bunch together in time."""
    order, left = [], dict(counts)
    while any(left.values()):
        for side in counts:
            if left[side]:
                order.append(side)
                left[side] -= 1
    return order


def _pooled(lines: list[dict], nulls: list[dict]) -> dict:
    """function -> measure -> pooled summary, for the runs of one side."""
    out: dict = {}
    for function in ("cuLaunchKernel", "cuLaunchKernelEx"):
        for measure in ("submit", "total"):
            summaries = _summaries(lines, function, measure)
            if summaries:
                out.setdefault(function, {})[measure] = pool(summaries)
    if nulls:
        out["cuLaunchKernel_null"] = {"submit": pool([n["cuLaunchKernel_null"]["submit"] for n in nulls])}
    return out


COMPARE = "compare:"  # the prefix of an envs key naming another library to measure (--compare)


def measure_paired(binary: Path, envs: dict[str, dict[str, str]], runs: int, control_runs: int,
                   gate_only_runs: int, rounds: int, batch: int) -> dict:
    """Paired processes: `runs` under the library (the headline), `control_runs` natively (A/A), and
    `gate_only_runs` under the library with checkpoints off (envs["gate_only"]: NVSHARE_MAX_INFLIGHT=0),
    which splits the added cost into the gate and the checkpoints; `runs` more under each other
    library (envs["compare:LABEL"]), reported under "compare". Interleaved."""
    if runs < 1 or control_runs < 0 or gate_only_runs < 0:
        raise ValueError("paired runs: at least one under the library, none or more of the others")
    counts = {"library": runs, "native": control_runs, "gate_only": gate_only_runs}
    counts.update({side: runs for side in envs if side.startswith(COMPARE)})
    lines: dict[str, list[dict]] = {side: [] for side in counts}
    nulls: dict[str, list[dict]] = {side: [] for side in counts}
    null_problems: list[str] = []
    ex_errors: list[str] = []
    for side in _interleave(counts):
        launch, null, problem = run_paired(binary, envs[side], rounds, batch)
        lookup, series = launch["cuLaunchKernel"]["lookup"], launch["cuLaunchKernel"]["series"]
        if side != "native" and not lookup["hooked"]:
            raise RuntimeError(f"under the library, dlsym(libcuda, \"cuLaunchKernel\") is not the library's "
                               f"wrapper: {lookup}")
        if {series["wrapper_result"], series["real_result"]} != {"CUDA_SUCCESS"}:
            raise RuntimeError(f"paired launches failed ({side}): wrapper {series['wrapper_result']}, "
                               f"real {series['real_result']}")
        ex = launch.get("cuLaunchKernelEx")
        if ex and {ex["series"]["wrapper_result"], ex["series"]["real_result"]} != {"CUDA_SUCCESS"}:
            ex_errors.append(f"{side}: {ex['series']['wrapper_result']} / {ex['series']['real_result']}")
            launch["cuLaunchKernelEx"] = None  # no numbers from failed launches
        lines[side].append(launch)
        if null is not None:
            nulls[side].append(null)
        elif problem:
            null_problems.append(f"{side}: {problem}")
    pooled = {side: _pooled(lines[side], nulls[side]) for side in counts}
    functions: dict = {}
    for function, measures in pooled["library"].items():
        for measure, ours in measures.items():
            functions.setdefault(function, {})[measure] = {
                "library": ours,
                "control": pooled["native"].get(function, {}).get(measure),
                "gate_only": pooled["gate_only"].get(function, {}).get(measure),
            }
    result: dict = {"rounds_per_run": rounds, "batch": batch, "runs": runs, "control_runs": control_runs,
                    "gate_only_runs": gate_only_runs,
                    "lookup": lines["library"][0]["cuLaunchKernel"]["lookup"],
                    "dlsym_object": lines["library"][0].get("dlsym_object"), "functions": functions}
    compared = {side[len(COMPARE):]: pooled[side] for side in counts if side.startswith(COMPARE)}
    if compared:
        result["compare"] = compared
    if ex_errors:
        result["errors"] = {"cuLaunchKernelEx": ex_errors}
    if null_problems:
        result["null_problems"] = null_problems
    return result


# ----------------------------------------------------------------------------- end to end

def measure_end_to_end(binary: Path, envs: dict[str, dict[str, str]], reps: int, launches: int,
                       null_calls: int) -> dict:
    if reps < 1:
        return {}
    samples: dict[str, dict[str, list[float]]] = {side: {m: [] for m in METRICS} for side in envs}
    null_result: dict[str, str] = {}
    for _, side in alternating(reps):
        for mode in ("launches", "null"):
            try:
                out = run_binary(binary, envs[side], mode, launches, null_calls)
            except AssertionError as e:
                if mode == "launches":
                    raise
                null_result[side] = f"failed: {str(e)[:300]}"  # keep the launch numbers
                continue
            null_result[side] = out.get("result", null_result.get(side))
            for name, (metric_mode, path) in METRICS.items():
                if metric_mode == mode:
                    value = out
                    for key in path:
                        value = value[key]
                    samples[side][name].append(float(value))
    rows = {}
    for name in METRICS:
        nat, ours = samples["native"][name], samples["library"][name]
        native, library = median(nat), median(ours)
        rows[name] = {"native": native, "library": library, "delta": library - native,
                      "ratio": library / native if native else None,
                      "native_range": [min(nat), max(nat)] if nat else None,
                      "library_range": [min(ours), max(ours)] if ours else None,
                      "samples": {side: samples[side][name] for side in samples}}
    return {"reps": reps, "launches_per_rep": launches, "null_calls_per_rep": null_calls, "metrics": rows,
            "null_call_result": null_result}


def measure(lib: Path, sched, reps: int = 8, launches: int = 40_000, null_calls: int = 200_000,
            paired_runs: int = 4, control_runs: int = 2, gate_only_runs: int = 1, rounds: int = 200,
            batch: int = 1000, compare: dict[str, Path] | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="nvs-bench-") as tmp:
        binary = build(Path(tmp))
        envs = {"native": harness.native_env(), "library": harness.library_env(lib, sched.socket),
                "gate_only": harness.library_env(lib, sched.socket, NVSHARE_MAX_INFLIGHT=0)}
        for label, other in (compare or {}).items():
            envs[COMPARE + label] = harness.library_env(other, sched.socket)
        try:
            paired = measure_paired(binary, envs, paired_runs, control_runs, gate_only_runs, rounds, batch)
        except (AssertionError, RuntimeError, ValueError, KeyError) as e:  # keep the end-to-end rows
            paired = {"error": f"{type(e).__name__}: {e}"}
        end_to_end = measure_end_to_end(binary, {side: envs[side] for side in ("native", "library")}, reps,
                                        launches, null_calls)
    return {"paired": paired, **end_to_end}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=8, help="end-to-end runs of each side")
    p.add_argument("--launches", type=int, default=40_000, help="launches per end-to-end run and round")
    p.add_argument("--paired-runs", type=int, default=4, help="paired processes under the library")
    p.add_argument("--control-runs", type=int, default=2, help="paired processes run natively (A/A)")
    p.add_argument("--gate-only-runs", type=int, default=1,
                   help="paired processes under the library with checkpoints off (NVSHARE_MAX_INFLIGHT=0)")
    p.add_argument("--rounds", type=int, default=200, help="rounds per paired process")
    p.add_argument("--batch", type=int, default=1000, help="launches per batch in the paired runs")
    p.add_argument("--json-out", type=Path)
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                   help="another libnvshare.so measured in the same run, paired like this tree's (repeatable)")
    args = p.parse_args(argv)
    try:
        compare = {label: Path(path) for label, path in (spec.split("=", 1) for spec in args.compare)}
    except ValueError:
        p.error("--compare takes LABEL=PATH")
    for label, path in compare.items():
        if not label or not path.is_file():
            p.error(f"--compare {label}={path}: needs a label and an existing libnvshare.so")
    if args.reps < 0:
        p.error("--reps from 0 (0: no end-to-end rows)")
    require_safe_gpu()
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, args.reps, args.launches,
                         paired_runs=args.paired_runs, control_runs=args.control_runs,
                         gate_only_runs=args.gate_only_runs, rounds=args.rounds, batch=args.batch,
                         compare={label: path.resolve() for label, path in compare.items()})
    print(paired_text(result["paired"]))
    for name, row in result.get("metrics", {}).items():
        print(f"end-to-end {name:20s} native {row['native']:9.1f}  library {row['library']:9.1f}  "
              f"delta {row['delta']:+8.1f} ns")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


def paired_text(paired: dict) -> str:
    """The paired rows for a terminal: this tree's library, its A/A and gate-only figures, and each
    compared library's added ns beside this tree's."""
    if "functions" not in paired:
        return f"paired: {paired.get('error', 'no result')}"
    lines = []
    for function, rows in paired["functions"].items():
        for measure_name in ("submit", "total"):
            if measure_name in rows:
                ours, control, gate = (rows[measure_name][k] for k in ("library", "control", "gate_only"))
                aa = f"  A/A {control['delta_ns']:+6.1f}" if control else ""
                gate_text = f"  gate only {gate['delta_ns']:+6.1f}" if gate else ""
                lines.append(f"paired {function:20s} {measure_name:6s} added {ours['delta_ns']:+7.1f} ns "
                             f"(IQR {ours['delta_q1']:+.1f}..{ours['delta_q3']:+.1f}){aa}{gate_text}")
    for label, functions in paired.get("compare", {}).items():
        for function, measures in functions.items():
            theirs = measures["submit"]
            ours = paired["functions"].get(function, {}).get("submit", {}).get("library")
            beside = f"  this tree {ours['delta_ns'] - theirs['delta_ns']:+6.1f} ns against it" if ours else ""
            lines.append(f"{label:>13} {function:20s} submit added {theirs['delta_ns']:+7.1f} ns "
                         f"(IQR {theirs['delta_q1']:+.1f}..{theirs['delta_q3']:+.1f}){beside}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- in the suite

def run(quick: bool, time_left: float | None) -> dict:
    """The suite's quick form: paired in one process, 2 processes, 60-100 rounds."""
    short = time_left is not None and time_left < 35
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, reps=2 if short else 3, paired_runs=2, control_runs=1,
                         gate_only_runs=1, rounds=60 if short else 100)
    result["parameters"] = {"form": "quick", "paired_runs": 2, "rounds": 60 if short else 100}
    return result


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("added cost per kernel launch", error_of(section))]
    row = dig(section, "paired", "functions", "cuLaunchKernel", "submit") or {}
    ours, control = row.get("library") or {}, row.get("control") or {}
    delta = num(ours.get("delta_ns"))
    if delta is None:
        return [error_row("added cost per kernel launch", "no paired cuLaunchKernel result")]
    return [goal_row("added cost per kernel launch, cuLaunchKernel, paired in one process",
                 f"**{signed(delta)} ns** (IQR {signed(ours.get('delta_q1'))} .. {signed(ours.get('delta_q3'))})",
                 f"{f(ours.get('real_ns'))} ns per launch (driver alone); A/A control "
                 f"{signed(control.get('delta_ns'))} ns", "—", f"< {GOAL_NS:.0f} ns", delta < GOAL_NS)]


PAIRED_LABELS = {
    "cuLaunchKernel": "cuLaunchKernel",
    "cuLaunchKernelEx": "cuLaunchKernelEx",
    "cuLaunchKernel_null": "cuLaunchKernel(NULL), rejected at once (the call path alone)",
}


def _iqr(row: dict) -> str:
    return f"{signed(row.get('delta_q1'))} .. {signed(row.get('delta_q3'))}"


def section(s: dict) -> str:
    paired = s.get("paired") or {}
    if error_of(paired) and "functions" not in paired:
        return f"Not measured: `{error_of(paired)}`\n"
    lines = ["| entry point | measured | driver alone ns | through the wrapper ns | **added ns** (median) | "
             "IQR over rounds | median per process | checkpoints off: added ns | A/A control: added ns |",
             "|---|---|---:|---:|---:|---|---|---:|---|"]
    for function, rows in (paired.get("functions") or {}).items():
        for measure in ("submit", "total"):
            r = rows.get(measure) if isinstance(rows, dict) else None
            if not isinstance(r, dict):
                continue
            ours, control, gate = (r.get(k) or {} for k in ("library", "control", "gate_only"))
            what = "time in the calls" if measure == "submit" else "incl. the sync per batch"
            per_run = ", ".join(signed(v) for v in ours.get("per_run_delta_ns") or [])
            lines.append(f"| {PAIRED_LABELS.get(function, function)} | {what} | {f(ours.get('real_ns'))} | "
                         f"{f(ours.get('wrapper_ns'))} | **{signed(ours.get('delta_ns'))}** | {_iqr(ours)} | "
                         f"{per_run or '—'} | {signed(gate.get('delta_ns'))} | {signed(control.get('delta_ns'))} |")
    return "\n".join(lines) + (
        f"\n\nThe {dig(s, 'parameters', 'form') or 'full'} form of bench/launch/launch_overhead.py: one process under libnvshare.so alternates batches of "
        f"{paired.get('batch', '?')} empty-kernel launches through the library's wrapper and through the "
        f"driver's own function on one stream; {paired.get('rounds_per_run', '?')} rounds per process, "
        f"{paired.get('runs', '?')} processes; the difference per round, pooled (median, IQR). The A/A control "
        "is the same program run natively: the method's own bias. End-to-end rows and details are in the "
        "JSON.\n")


if __name__ == "__main__":
    raise SystemExit(main())
