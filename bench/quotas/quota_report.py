"""The report of bench/quotas/quota_limits.py: its rows of the headline table and its section.

A result of an earlier version (no graph, no live change, no clocks) still renders: those rows and
the clock columns are left out. A run without nvidia-smi has the clock columns, blank.
"""

from __future__ import annotations

from bench.quotas.quota_analysis import BURST_WINDOW_S, GOAL_COMBINED, GOAL_POINTS, WINDOW_S
from bench.core.render import error_of, error_row, f, goal_row, num, yes_no

DEFAULT_SHARES = (30, 70)
CLOCK_HEAD = " SM clock (MHz) | power (W) | GPU util (%) |"
CLOCK_RULE = "---:|---:|---:|"


def _has_clocks(s: dict) -> bool:
    """Whether the run sampled clocks, or tried to (a result from before the clocks has no such key)."""
    return "clocks" in (s.get("parameters") or {})


def clock_head(s: dict) -> tuple[str, str]:
    return (CLOCK_HEAD, CLOCK_RULE) if _has_clocks(s) else ("", "")


def clock_cells(clocks, shown: bool = True) -> str:
    """The three clock columns of a run (blank where there is no sample, e.g. without nvidia-smi)."""
    if not shown:
        return ""
    clocks = clocks if isinstance(clocks, dict) else {}
    cells = [f(v, 0) if num(v) is not None else "" for v in
             (clocks.get("sm_mhz"), clocks.get("power_w"), clocks.get("util_pct"))]
    return "".join(f" {c} |" for c in cells)


def _pct(value, digits: int = 1) -> str:
    return f"{f(num(value), digits)}%"


WORKLOADS = (("limits", "", "products"), ("memory_bound", ", memory-bound sums", "sums"))


def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("compute limits and shares", error_of(section))]
    rows = []
    for part, what, unit in WORKLOADS:
        rows += _limit_goals(section.get(part) or {}, what, unit)
    rows += _graph_goals(section) + _live_goals(section) + _share_goals(section)
    return rows


GOAL_WORDS = {"throughput": "of solo throughput", "gpu_time": "of the GPU's time (NVML)"}


def _goal_of(row: dict) -> str:
    """What a limit row is judged by (a result from before GPU time was judged: throughput)."""
    return row.get("goal") or "throughput"


def _limit_goals(limits: dict, what: str, unit: str) -> list[str]:
    """A row for each limit: its throughput, and the GPU's utilisation when it was sampled; judged
    by the one the run names as its goal."""
    rows, solo = [], limits.get("none") or {}
    for key, row in limits.items():
        if key == "none":
            continue
        goal = _goal_of(row)
        gpu = (row.get("gpu_time") or {}).get("util_pct")
        measured = f"{_pct(row.get('percent'))} of solo"
        if "gpu_time" in row:
            measured += f", GPU time {_pct(gpu)}"
        shown = _pct(gpu) if goal == "gpu_time" else _pct(row.get("percent"))
        rows.append(goal_row(f"compute limit {key}%{what}", measured,
                             f"{f(solo.get('ips'), 1)} {unit}/s (no limit)", f"**{shown}**",
                             f"{key} ± {GOAL_POINTS:g} points {GOAL_WORDS[goal]}", row.get("met")))
    return rows


def _timing_workload(s: dict) -> tuple[str, dict]:
    """The unit of the graph and live parts' workload and its limit-free run ("none" row): sums
    in a result that names --op add for them, products in an earlier one."""
    if (s.get("parameters") or {}).get("graph_live_op") == "add":
        return "sums", (s.get("memory_bound") or {}).get("none") or {}
    return "products", (s.get("limits") or {}).get("none") or {}


def _graph_goals(section: dict) -> list[str]:
    if "graph" not in section:
        return []
    unit = _timing_workload(section)[0]
    g = section.get("graph") or {}
    lim, solo = g.get("limited") or {}, g.get("solo") or {}
    return [goal_row(f"compute limit {lim.get('limit', '?')}%, CUDA graph replays",
                     f"{f(lim.get('ips'), 1)} {unit}/s",
                     f"{f(solo.get('ips'), 1)} {unit}/s (graph, no limit)",
                     f"**{_pct(lim.get('percent'))}**",
                     f"{lim.get('limit', '?')} ± {GOAL_POINTS:g} points", lim.get("met"))]


def _live_goals(section: dict) -> list[str]:
    if "live" not in section:
        return []
    live = section.get("live") or {}
    v = live.get("verdict") or {}
    lv = (section.get("parameters") or {}).get("live") or {}
    unit, none = _timing_workload(section)
    solo = f"{f(none.get('ips'), 1)} {unit}/s (no limit)"
    what = f"limit lowered {lv.get('from', '?')} → {lv.get('to', '?')}% while running"
    target = f"{lv.get('to', '?')} ± {GOAL_POINTS:g} points"
    held = v.get("held") or [None, None]
    return [goal_row(f"{what}: the {WINDOW_S:g} s after the change", "the GPU's clock (CUDA events)",
                     solo, f"**{_pct((v.get('windows') or {}).get('first_s'))}**", target,
                     v.get("effect_met")),
            goal_row(f"{what}: every {WINDOW_S:g} s window after it", "the GPU's clock (CUDA events)",
                     solo, f"**{_pct(held[0])} – {_pct(held[1])}**", target, v.get("held_met"))]


def _share_goals(section: dict) -> list[str]:
    rows = []
    sh = section.get("shares") or {}
    v = sh.get("verdict") or {}
    shares = (section.get("parameters") or {}).get("shares") or list(DEFAULT_SHARES)
    for i, share in enumerate(shares):
        pct = (v.get("percent") or [None] * 2)[i]
        exp = (v.get("expected") or [None] * 2)[i]
        met = (v.get("met") or [None] * 2)[i]
        rows.append(goal_row(f"compute share {share} (of {'+'.join(map(str, shares))})",
                             f"{f((sh.get('with') or [None] * 2)[i], 1)} products/s",
                             "the pair's combined throughput", f"**{_pct(pct)}**",
                             f"{f(exp, 0)} ± {GOAL_POINTS:g} points", met))
    with_ = sh.get("with") or [None]
    rows.append(goal_row("combined throughput with shares",
                         f"{f(sum(with_), 1)} products/s" if all(x is not None for x in with_) else "—",
                         "the same pair without shares", f"**{f(num(v.get('combined_ratio')), 3)}x**",
                         f">= {GOAL_COMBINED}x", v.get("combined_met")))
    return rows


def _limit_lines(s: dict) -> list[str]:
    head, rule = clock_head(s)
    shown = _has_clocks(s)
    lines = ["| run | per second | **percent of solo** | goal | met |" + head,
             "|---|---:|---:|---|---|" + rule]
    for part, what, unit in WORKLOADS:
        for key, row in (s.get(part) or {}).items():
            name = f"alone{what}"
            if key == "none":
                lines.append(f"| {name}, no limit | {f(row.get('ips'), 1)} {unit} | 100 | — | — |"
                             + clock_cells(row.get("clocks"), shown))
                continue
            lines.append(f"| {name}, NVSHARE_COMPUTE_LIMIT={key} | {f(row.get('ips'), 1)} {unit} | "
                         f"**{f(num(row.get('percent')), 1)}** | {key} ± {GOAL_POINTS:g} "
                         f"{GOAL_WORDS[_goal_of(row)]} | {yes_no(row.get('met'))} |"
                         + clock_cells(row.get("clocks"), shown))
    if "graph" in s:
        g = s.get("graph") or {}
        solo, lim = g.get("solo") or {}, g.get("limited") or {}
        unit = _timing_workload(s)[0]
        lines.append(f"| CUDA graph (8 {unit} a replay), no limit | {f(solo.get('ips'), 1)} {unit} | "
                     f"100 (graph solo) | — | — |" + clock_cells(solo.get("clocks"), shown))
        lines.append(f"| CUDA graph, NVSHARE_COMPUTE_LIMIT={lim.get('limit', '?')} | "
                     f"{f(lim.get('ips'), 1)} {unit} | **{f(num(lim.get('percent')), 1)}** (of graph "
                     f"solo) | {lim.get('limit', '?')} ± {GOAL_POINTS:g} | {yes_no(lim.get('met'))} |"
                     + clock_cells(lim.get("clocks"), shown))
    return lines


def _range(values) -> str:
    values = values or [None, None]
    return f"{f(num(values[0]), 1)} – {f(num(values[1]), 1)}"


def _live_lines(s: dict) -> list[str]:
    if "live" not in s:
        return []
    live = s.get("live") or {}
    v = live.get("verdict") or {}
    w = v.get("windows") or {}
    lv = (s.get("parameters") or {}).get("live") or {}
    head, rule = clock_head(s)
    return ["", "| live change (percent of solo, GPU clock) | change at | second before | "
                f"**second after** | second 1-2 after | **every {WINDOW_S:g} s window after** | "
                f"{BURST_WINDOW_S:g} s windows from 1 s after | goal | met |" + head,
            "|---|---:|---:|---:|---:|---:|---:|---|---|" + rule,
            f"| NVSHARE_COMPUTE_LIMIT={lv.get('from', '?')}, lowered to {lv.get('to', '?')} | "
            f"{f(live.get('change_s'), 2)} s | {f(num(w.get('before')), 1)} | "
            f"**{f(num(w.get('first_s')), 1)}** | {f(num(w.get('second_s')), 1)} | "
            f"**{_range(v.get('held'))}** | {_range(v.get('spread'))} | {lv.get('to', '?')} ± "
            f"{GOAL_POINTS:g} | {yes_no(v.get('effect_met'))} / {yes_no(v.get('held_met'))} |"
            + clock_cells(live.get("clocks"), _has_clocks(s))]


def _share_lines(s: dict) -> list[str]:
    params = s.get("parameters") or {}
    sh = s.get("shares") or {}
    v = sh.get("verdict") or {}
    shares = params.get("shares") or list(DEFAULT_SHARES)
    head, rule = clock_head(s)
    shown = _has_clocks(s)
    lines = ["", "| pair (mode auto) | products/s each | combined | **percent of combined** | goal | "
                 "met |" + head, "|---|---:|---:|---:|---|---|" + rule]
    without = sh.get("without") or []
    if without and all(x is not None for x in without):
        tot = sum(without)
        lines.append(f"| no shares | {' / '.join(f(x, 1) for x in without)} | {f(tot, 1)} | "
                     f"{' / '.join(f(100 * x / tot, 1) for x in without)} | — | — |"
                     + clock_cells(sh.get("clocks_without"), shown))
    with_ = sh.get("with") or []
    if with_ and all(x is not None for x in with_):
        lines.append(f"| NVSHARE_COMPUTE_SHARE={' / '.join(map(str, shares))} | "
                     f"{' / '.join(f(x, 1) for x in with_)} | {f(sum(with_), 1)} | "
                     f"**{' / '.join(f(num(x), 1) for x in (v.get('percent') or []))}** | "
                     f"{' / '.join(f(x, 0) for x in (v.get('expected') or []))} ± {GOAL_POINTS:g} | "
                     f"{' / '.join(yes_no(m) for m in (v.get('met') or []))} |"
                     + clock_cells(sh.get("clocks_with"), shown))
    lines.append(f"\nCombined throughput with shares over without: **{f(num(v.get('combined_ratio')), 3)}x** "
                 f"(goal >= {GOAL_COMBINED}; {yes_no(v.get('combined_met'))}).")
    return lines


def section(s: dict) -> str:
    params = s.get("parameters") or {}
    lv = params.get("live") or {}
    text = (f"\n\nEach workload (bench/quotas/quota_workload.py) issues back-to-back {params.get('seconds', '?')} s of "
            "4096 x 4096 16-bit matrix products and counts them from one synchronisation to the next. "
            "Limits: one process alone under a scheduler; its throughput over the same workload's with no "
            "limit (solo, measured in the same run). Shares: two processes started together under one "
            f"scheduler in mode auto (tq {params.get('tq', '?')} s); each one's part of their combined "
            "throughput.")
    unit = _timing_workload(s)[0]
    if "memory_bound" in s:
        text += (" Memory-bound: the same limits on sums of two 64 Mi-element 16-bit vectors "
                 "(`--op add`), bound by memory bandwidth rather than arithmetic: they run at one "
                 "clock whatever the limit, so their throughput is the GPU time they got; the products' "
                 "limits are judged by the GPU's utilisation (NVML) instead.")
    if "graph" in s:
        text += (f" CUDA graph: the {unit} captured 8 to a graph that the workload replays; its percent "
                 "is of the graph's own solo throughput.")
    if "live" in s:
        text += (f" Live change: one {unit} workload under NVSHARE_COMPUTE_LIMIT={lv.get('from', '?')} records a "
                 f"CUDA event every {lv.get('trace_every', '?')} {unit}; {lv.get('change_at', '?')} s "
                 f"after its go the limit is set to {lv.get('to', '?')} through the scheduler "
                 "(`nvsharectl --set-compute-limit`), and the change is placed where the reply came. "
                 f"The limit took effect within {WINDOW_S:g} s when the share achieved over the "
                 f"{WINDOW_S:g} s after the change is within the points, and held when every "
                 f"{WINDOW_S:g} s window from the change on (stepped by 0.1 s) is; the range of "
                 f"{BURST_WINDOW_S:g} s windows shows how evenly the limited work runs.")
    if _has_clocks(s):
        text += (" Clocks: nvidia-smi every 50 ms, means over each run's measured phase less its first 0.5 s "
                 "and last 0.2 s (blank: no nvidia-smi). A GPU that is busy only part of the time is "
                 "not held at its power cap and runs at a higher clock, so each product is faster and a "
                 "limit of L% of the GPU's time gives a little more than L% of the solo throughput of "
                 "work bound by arithmetic. The GPU time itself is judged by the GPU's utilisation "
                 "(NVML, the share of time a kernel ran), measured outside the library.")
    return "\n".join(_limit_lines(s) + _live_lines(s) + _share_lines(s)) + text + "\n"
