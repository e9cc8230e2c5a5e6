"""What the benchmark modules share to render their results: number formats, safe look-ups in a result
of any shape, the goal rows of the headline table, error rows and a bar chart.

Every renderer is defensive: a benchmark that failed, was skipped or is missing a key shows an error
row and the rest still renders.
"""

from __future__ import annotations

import json
import math
from typing import Any

GOAL_HEAD = ["| goal | measured | baseline (same run) | ratio | target | met |", "|---|---|---|---|---|---|"]


def num(value: Any) -> float | None:
    """A finite number, else None (missing keys, None, NaN, strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def f(value: Any, digits: int = 1, unit: str = "") -> str:
    v = num(value)
    return "—" if v is None else f"{v:.{digits}f}{unit}"


def signed(value: Any, digits: int = 1) -> str:
    v = num(value)
    return "—" if v is None else f"{v:+.{digits}f}"


def yes_no(ok: bool | None) -> str:
    return "—" if ok is None else ("**yes**" if ok else "**no**")


def dig(obj: Any, *path: Any) -> Any:
    """obj[path[0]][path[1]]...; integer keys also match their string form (JSON turns 2 into "2")."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        if key in obj:
            obj = obj[key]
        elif str(key) in obj:
            obj = obj[str(key)]
        else:
            return None
    return obj


def numeric_items(d: Any) -> list[tuple[str, Any]]:
    """A dict's items ordered by the numeric value of their keys (non-numeric keys last)."""
    if not isinstance(d, dict):
        return []

    def order(key: str) -> tuple[int, float, str]:
        try:
            return (0, float(key), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(key))
    return sorted(((str(k), v) for k, v in d.items()), key=lambda kv: order(kv[0]))


def error_of(section: Any) -> str | None:
    """Why a benchmark has no result, or None when it has one."""
    if section is None:
        return "not run"
    if not isinstance(section, dict):
        return f"unexpected result {type(section).__name__}"
    if "error" in section:
        return str(section["error"]).splitlines()[0] if section["error"] else "failed"
    return None


def error_row(what: str, reason: str) -> str:
    return f"| {what} | not measured: `{reason}` | — | — | — | — |"


def params_text(section: dict) -> str:
    params = section.get("parameters") or section.get("params")
    if not isinstance(params, dict) or not params:
        return ""
    items = []
    for k, v in params.items():
        text = json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v)
        items.append(f"`{k}={text[:120]}`")
    return "Parameters: " + ", ".join(items) + "\n"



def goal_row(goal: str, measured: str, baseline: str, ratio: str, target: str, met: bool | None) -> str:
    return f"| {goal} | {measured} | {baseline} | {ratio} | {target} | {yes_no(met)} |"


def seconds(value: Any) -> str:
    return f"{f(value, 2)} s"


def extra_text(s: dict) -> str:
    """The benchmark's own method text, notes and correctness check, when it gives them."""
    parts = []
    text = s.get("method") or s.get("description")
    if isinstance(text, str) and text.strip():
        parts.append(text.strip())
    notes = s.get("notes")
    if isinstance(notes, list) and notes:
        parts.append("Notes:\n" + "\n".join(f"- {n}" for n in notes if isinstance(n, str)))
    correctness = s.get("correctness")
    if isinstance(correctness, dict) and "ok" in correctness:
        parts.append(f"Correctness check (final losses, working sets): "
                     f"{'passed' if correctness['ok'] else '**failed**: ' + json.dumps(correctness)[:300]}")
    return "".join(f"\n{p}\n" for p in parts)


def bars(plt, groups: list[str], series: dict[str, list[float | None]], ylabel: str, title: str,
          log: bool = False, hline: tuple[float, str] | None = None):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None else 0 for v in values]
        bars = ax.bar(xs, ys, width, label=label)
        for bar, v in zip(bars, values):
            if v is not None:
                ax.annotate(f"{v:.4g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    if hline:
        ax.axhline(hline[0], color="grey", linestyle="--", linewidth=1, label=hline[1])
    ax.legend(fontsize=8)
    return fig


def table_bars(plt, table: Any, ways: tuple[tuple[str, str], ...], group: str, ylabel: str, title: str):
    """Bars of a table keyed by numbers ({2: {"auto": s, ...}, 4: ...}): one group per key (named by
    `group`, a format with {}), one series per (label, column) of `ways`; None when it is empty."""
    rows = numeric_items(table)
    if not rows:
        return None
    series = {label: [num(dig(r, key)) for _, r in rows] for label, key in ways}
    return bars(plt, [group.format(k) for k, _ in rows], series, ylabel, title)


def finish(result: dict, started: float, rerun: str, quick: bool, section, json_path) -> None:
    """The end of a GPU benchmark run alone: stamp its duration and rerun command on `result`,
    print its section, and write it to `json_path` (None: nowhere)."""
    import json
    import time

    result["seconds"] = time.monotonic() - started
    result["rerun"] = rerun + (" --quick" if quick else "")
    print(section(result))
    if json_path:
        json_path.write_text(json.dumps(result, indent=2))
