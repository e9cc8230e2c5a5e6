"""Two jobs that do not fit: the makespan of two training jobs whose working sets do not fit together in
the scheduler's virtual capacity, at two quanta, with fast switches (bulk eviction and prefetch) and
with demand faults, against the two run one after the other (the measurement is in bench/makespan.py:
`python3 bench/makespan.py --pair`)."""

from __future__ import annotations

import json

from makespan import PAIR_GOAL, run_pair
from render import (dig, error_of, error_row, extra_text, f, goal_row, num, numeric_items, seconds, table_bars,
                    yes_no)

NAME = "makespan_pair"
TITLE = "Two jobs that do not fit: quantum, fast switches, demand faults"
SHARE, MIN_S, GPU = 130, 50, True
RERUN = "python3 bench/makespan.py --pair"
PLOTS = {"makespan-pair.png": "makespans of two jobs that do not fit"}
PAIR_TQ = 5  # the quantum the goal is judged at
NVSHARE_PAIR_RATIO = 1.94  # nvshare's two jobs at TQ 5 s vs one after the other (its published figure)


def run(quick: bool, time_left: float | None) -> dict:
    return run_pair(quick, time_left)


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row(f"two jobs that do not fit, TQ {PAIR_TQ} s", error_of(section))]
    row = dig(section, "tq", PAIR_TQ)
    if not isinstance(row, dict):
        return [error_row(f"two jobs that do not fit, TQ {PAIR_TQ} s", f"no TQ {PAIR_TQ} s in the result")]
    r = num(row.get("fast_vs_sequential"))
    rows = [goal_row(f"two jobs that do not fit, TQ {PAIR_TQ} s, fast switches: makespan vs one after the "
                 f"other (nvshare: {NVSHARE_PAIR_RATIO}x)", f"{f(row.get('fast'), 2)} s",
                 f"{f(row.get('sequential'), 2)} s (sequential)", f"**{f(r, 3)}x**", f"≤ {PAIR_GOAL:.2f}x",
                 None if r is None else r <= PAIR_GOAL)]
    d = num(row.get("demand_vs_sequential"))
    if d is not None:
        rows.append(goal_row("the same with demand faults (NVSHARE_PREFETCH=off), for comparison",
                         f"{f(row.get('demand'), 2)} s", f"{f(row.get('sequential'), 2)} s (sequential)",
                         f"{f(d, 3)}x", "—", None))
    return rows


def section(s: dict) -> str:
    lines = ["| TQ s | one after the other s | fast switches s | demand faults s | **fast / sequential** | "
             "demand / sequential | switches | fast switch: handoff / evict / prefetch ms | ≤ 1.10x (TQ 5 s) |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    notes = []
    for tq, row in numeric_items(s.get("tq")):
        fast = dig(row, "fast_switch") or {}
        detail = (f"{f(fast.get('handoff_ms'))} / {f(fast.get('evict_ms'))} / {f(fast.get('prefetch_ms'))}"
                  if isinstance(fast, dict) else "—")
        if isinstance(dig(row, "note"), str):
            notes.append(f"- TQ {tq} s: {row['note']}")
        r = num(dig(row, "fast_vs_sequential"))
        goal = yes_no(None if r is None else r <= PAIR_GOAL) if tq in (str(PAIR_TQ), f"{PAIR_TQ:.1f}") else "—"
        switches = dig(row, "switches")
        switches = json.dumps(switches, separators=(",", ":")) if isinstance(switches, (dict, list)) else (
            "—" if switches is None else str(switches))
        lines.append(f"| {tq} | {seconds(dig(row, 'sequential'))} | {seconds(dig(row, 'fast'))} | "
                     f"{seconds(dig(row, 'demand'))} | **{f(r, 3)}x** | {f(dig(row, 'demand_vs_sequential'), 3)}x | "
                     f"{switches} | {detail} | {goal} |")
    if len(lines) == 2:
        lines.append("| — | not measured: no 'tq' in the result | | | | | | | |")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + (
        "\n\nTwo jobs whose resident working sets do not fit together in the scheduler's virtual capacity "
        "(`--gpu-memory`), mode auto with an explicit quantum; fast switches = NVSHARE_PREFETCH=wait (bulk "
        "eviction, bulk prefetch), demand = NVSHARE_PREFETCH=off (the eviction on the handoff is real too; the "
        "data comes back by page faults); against the two jobs run one after the other in the same run. "
        f"Switches: DROP_LOCK lines in the scheduler's log. nvshare took {NVSHARE_PAIR_RATIO}x at TQ 5 s. A "
        "quantum longer than a job gives no switch: that is the result, not a failure.\n" + extra_text(s))


def plot(s: dict, plt) -> dict:
    ways = (("one after the other", "sequential"), ("fast switches", "fast"), ("demand faults", "demand"))
    return {"makespan-pair.png": table_bars(plt, s.get("tq"), ways, "TQ {} s", "makespan s",
                                            "two jobs that do not fit")}
