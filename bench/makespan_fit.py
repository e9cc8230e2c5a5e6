"""Jobs that fit: the makespan of identical training jobs whose memory fits together, in the scheduler's
auto mode, against the same jobs run concurrently without the library and one after the other (the
measurement is in bench/makespan.py: `python3 bench/makespan.py --jobs 2,4`)."""

from __future__ import annotations

from makespan import FIT_GOAL, run_fitting
from render import (dig, error_of, error_row, extra_text, f, goal_row, num, numeric_items, seconds,
                    table_bars, yes_no)

NAME = "makespan_fit"
TITLE = "Jobs that fit: auto mode vs concurrent vs one after the other"
SHARE, MIN_S, GPU = 120, 40, True
RERUN = "python3 bench/makespan.py --jobs 2,4"
PLOTS = {"makespan-fit.png": "makespans of jobs that fit"}


def run(quick: bool, time_left: float | None) -> dict:
    return run_fitting(quick, time_left)


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("jobs that fit: auto vs concurrent", error_of(section))]
    rows = []
    for n, row in numeric_items(dig(section, "jobs")):
        r = num(dig(row, "auto_vs_concurrent"))
        rows.append(goal_row(f"{n} jobs that fit: makespan in auto mode vs concurrent without the library",
                         f"{f(dig(row, 'auto'), 2)} s", f"{f(dig(row, 'concurrent'), 2)} s (concurrent)",
                         f"**{f(r, 3)}x**", f"≤ {FIT_GOAL:.2f}x", None if r is None else r <= FIT_GOAL))
    return rows or [error_row("jobs that fit", "no 'jobs' in the result")]


def section(s: dict) -> str:
    lines = ["| jobs | concurrent, no library s | auto mode s | one after the other s | **auto / concurrent** "
             "| auto / sequential | ≤ 1.02x |", "|---:|---:|---:|---:|---:|---:|---|"]
    for n, row in numeric_items(s.get("jobs")):
        r = num(dig(row, "auto_vs_concurrent"))
        lines.append(f"| {n} | {seconds(dig(row, 'concurrent'))} | {seconds(dig(row, 'auto'))} | "
                     f"{seconds(dig(row, 'sequential'))} | **{f(r, 3)}x** | {f(dig(row, 'auto_vs_sequential'), 3)}x | "
                     f"{yes_no(None if r is None else r <= FIT_GOAL)} |")
    if len(lines) == 2:
        lines.append("| — | not measured: no 'jobs' in the result | | | | | |")
    return "\n".join(lines) + (
        "\n\nIdentical training jobs whose memory fits, three ways in the same run: concurrently without the "
        "library (the driver time-slices), concurrently under the library with the scheduler in mode auto "
        "(all fit, so all should be granted at once), and one after the other (each alone, the sum). "
        "Makespan: from a common start instant, after every job has initialised, to the last job's end.\n"
        + extra_text(s))


def plot(s: dict, plt) -> dict:
    ways = (("concurrent, no library", "concurrent"), ("auto mode", "auto"), ("one after the other", "sequential"))
    return {"makespan-fit.png": table_bars(plt, s.get("jobs"), ways, "{} jobs", "makespan s", "jobs that fit")}
