#!/usr/bin/env python3
"""Switch cost: how long a client whose W GiB were evicted to host takes to be back at full speed,
with bulk moves (NVSHARE_PREFETCH=wait, =overlap) and with demand faults (=off, without the swap
store), against a pinned host-to-device copy of W GiB made natively (the bus's time).

The method, its parameters and the shape of the result are described in bench/switching/switch_measure.py (the
measurement) and bench/switching/switch_worker.py (A, the GPU process); this module is the benchmark: it runs
the measurement within its time, judges it and renders it.

    python3 -m bench.switching.switch_cost [--quick] [--sizes 1,4,8] [--cycles 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


from bench.core.render import bars, dig, error_of, error_row, f, goal_row, num, numeric_items, yes_no  # noqa: E402
from bench.switching.switch_measure import (GOAL_VS_COPY, MAX_SIZE_GIB, VARIANTS, headline,  # noqa: E402
                                            library_worker, measure, plan)
from bench.switching.swap import reference  # noqa: E402

NAME = "switch_cost"
TITLE = "Switch cost: bulk moves vs a pinned copy, and demand faults"
SHARE, MIN_S, GPU = 80, 35, True
RERUN = "python3 -m bench.switching.switch_cost"
REFERENCE_S = 10.0  # the pinned copies' process (PyTorch's start and 3 x 2 copies of max(W) GiB)
REFERENCE_TIMEOUT_S = 60.0
PLOTS = {"switch-cost.png": "switch cost per size: a pinned copy, wait, overlap, demand faults",
         "switch-timeline.png": "A's passes around one switch of the largest size"}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    from bench.core.common import harness, require_safe_gpu

    t0 = time.monotonic()
    require_safe_gpu()
    p = plan(quick, None if time_left is None else time_left - REFERENCE_S)
    deadline = None if time_left is None else t0 + time_left
    result = measure_against_copy(library_worker(harness.library_path()), p["sizes"], p["cycles"],
                                  deadline=deadline)
    result["parameters"]["dropped_sizes_gib"] = p["dropped_sizes"]
    result["parameters"]["estimate_s"] = p["estimate_s"]
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def copy_reference(gib: float) -> dict:
    """Pinned host <-> device copies of the largest size, natively (bench/switching/swap_server.py).
    When they fail the switches are still measured, with no goal and the reason beside them."""
    whole = max(1, round(gib))
    try:
        h2d_s, d2h_s = reference(whole, timeout=REFERENCE_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001  (a timeout, a failed process, an unreadable line)
        return {"gib": whole, "error": f"{type(e).__name__}: {e}"}
    return {"gib": whole, "h2d_ms_per_gib": h2d_s * 1e3 / whole, "d2h_ms_per_gib": d2h_s * 1e3 / whole}


def measure_against_copy(a_command, sizes: list[float], cycles: int, **kw) -> dict:
    """The pinned copy of the largest size first (natively, before A or the scheduler start), then
    the switches (switch_measure.measure), judged against it."""
    copy = copy_reference(max(sizes))
    result = measure(a_command, sizes, cycles, **kw)
    with_copy(result, copy)
    return result


def with_copy(result: dict, copy: dict) -> None:
    """The headline judged against the pinned copy."""
    result["reference"] = copy
    result["headline"] = headline(result["variants"], copy.get("h2d_ms_per_gib"))


def parse_sizes(text: str) -> list[float]:
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size list {text!r}: GiB numbers separated by commas") from None
    if not sizes or any(not 0 < s <= MAX_SIZE_GIB for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be in (0, {MAX_SIZE_GIB:g}] GiB (GPU safety)")
    return sizes


def parse_variants(text: str) -> tuple[str, ...]:
    variants = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in variants if v not in VARIANTS]
    if not variants or bad:
        raise argparse.ArgumentTypeError(f"variants are {', '.join(VARIANTS)}")
    return variants


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 cycles per size")
    p.add_argument("--sizes", type=parse_sizes, help="GiB held by A, comma-separated (default 1,4,8)")
    p.add_argument("--cycles", type=int, help="B cycles per size and variant (default 3)")
    p.add_argument("--variants", type=parse_variants, default=VARIANTS,
                   help="NVSHARE_PREFETCH values, comma-separated (default wait,off,overlap)")
    p.add_argument("--tq", type=float, default=60.0, help="the scheduler's explicit quantum, s (default 60)")
    p.add_argument("--debug-a", action="store_true", help="run A with NVSHARE_DEBUG=1 (its log tail goes "
                   "into the result)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.cycles is not None and args.cycles < 1:
        p.error("--cycles must be >= 1")
    if args.tq <= 0:
        p.error("--tq must be positive")
    from bench.core.common import require_safe_gpu

    try:
        require_safe_gpu()
    except RuntimeError as e:
        print(f"switch_cost: {e}", file=sys.stderr)
        return 3
    from bench.core.common import harness

    params = plan(args.quick, None, args.sizes, args.cycles)
    result = measure_against_copy(library_worker(harness.library_path(), args.debug_a), params["sizes"],
                                  params["cycles"], variants=args.variants, tq=args.tq)
    result["rerun"] = " ".join([RERUN, *(argv if argv is not None else sys.argv[1:])])
    for key, row in result["headline"].items():
        print(f"{key:>4} GiB  wait {_ms(row['wait_ms'])}  overlap {_ms(row['overlap_ms'])}  off {_ms(row['off_ms'])}"
              f"  pinned copy {_ms(row['copy_ms'])}  bulk/copy {row['bulk_vs_copy'] or float('nan'):.2f}x"
              f"  demand/bulk {row['demand_vs_bulk'] or float('nan'):.1f}x ({row['faster_bulk']} faster)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    failed = [v for v, r in result["variants"].items() if "error" in r]
    return 1 if failed else 0


def _ms(value: float | None) -> str:
    return "      —" if value is None else f"{value:7.1f} ms"


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("switch cost, bulk vs a pinned copy", error_of(section))]
    rows = []
    for size, row in numeric_items(dig(section, "headline")):
        bulk = row.get("faster_bulk")
        r = num(row.get("bulk_vs_copy"))
        other = "overlap" if bulk == "wait" else "wait"
        measured = (f"{f(row.get(f'{bulk}_ms'), 1)} ms (NVSHARE_PREFETCH={bulk}; {other}: "
                    f"{f(row.get(f'{other}_ms'), 1)} ms; demand faults: {f(row.get('off_ms'), 1)} ms, "
                    f"{f(row.get('demand_vs_bulk'), 1)}x)") if bulk else "—"
        copy_error = error_of(section.get("reference") or {})
        baseline = (f"not measured: `{copy_error}`" if copy_error else
                    f"{f(row.get('copy_ms'), 1)} ms (pinned host-to-device copy, natively)")
        rows.append(goal_row(f"switch back of {size} GiB evicted to host vs a pinned copy of {size} GiB",
                         measured, baseline,
                         f"**{f(r, 2)}x**", f"≤ {GOAL_VS_COPY:g}x", row.get("goal_met")))
    return rows or [error_row("switch cost", "no sizes measured")]


def section(s: dict) -> str:
    lines = ["| W GiB | NVSHARE_PREFETCH | switch ms (median) | each cycle ms | back to full speed ms | "
             "steady pass ms | B waited ms | evict ms (log) | prefetch ms (log) | drop had EVICT | "
             "data intact |", "|---:|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
    variants = s.get("variants") or {}
    sizes = [k for k, _ in numeric_items(dig(s, "headline"))] or sorted(
        {k for v in variants.values() if isinstance(v, dict) for k in (v.get("sizes") or {})})
    for size in sizes:
        for name in ("wait", "overlap", "off"):
            v = variants.get(name)
            if v is None:
                continue
            if error_of(v) and not v.get("sizes"):
                lines.append(f"| {size} | {name} | not measured: `{error_of(v)}` | | | | | | | | |")
                continue
            row = dig(v, "sizes", size)
            if not isinstance(row, dict) or error_of(row):
                lines.append(f"| {size} | {name} | not measured: `{error_of(row) or 'missing'}` | | | | | | | | |")
                continue
            each = ", ".join(f(x, 1) for x in row.get("switch_ms_all") or []) or "—"
            each += " (one cycle: the cold one)" if row.get("cold_counted") else ""
            flags = row.get("evict_flags") or []
            lines.append(f"| {size} | {name} | **{f(row.get('switch_ms'))}** | {each} | {f(row.get('recovered_ms'))} | "
                         f"{f(row.get('steady_pass_ms'), 2)} | {f(row.get('handoff_ms'))} | {f(row.get('evict_ms'))} | "
                         f"{f(row.get('prefetch_ms'))} | {', '.join(str(x) for x in flags) or '—'} | "
                         f"{'yes' if row.get('data_ok') else ('no' if row.get('data_ok') is False else '—')} |")
    for name, v in variants.items():
        if isinstance(v, dict) and v.get("sizes") and error_of(v):
            lines.append(f"\nNVSHARE_PREFETCH={name}: `{error_of(v)}`")
    head = [f"\n| W GiB | pinned copy ms | faster bulk variant | **bulk / copy** | ≤ {GOAL_VS_COPY:g}x | "
            "demand / wait | demand / overlap |", "|---:|---:|---|---:|---|---:|---:|"]
    for size, row in numeric_items(dig(s, "headline")):
        head.append(f"| {size} | {f(row.get('copy_ms'), 1)} | {row.get('faster_bulk') or '—'} | "
                    f"**{f(row.get('bulk_vs_copy'), 2)}x** | {yes_no(row.get('goal_met'))} | "
                    f"{f(row.get('demand_vs_wait'), 1)}x | {f(row.get('demand_vs_overlap'), 1)}x |")
    p = s.get("parameters") or {}
    return "\n".join(lines + head) + (
        "\n\nA: a PyTorch process under libnvshare.so holds W GiB in one float32 tensor and loops "
        "`x.add_(1.0); torch.cuda.synchronize()`, recording each pass's start and end (CLOCK_MONOTONIC). "
        f"Scheduler: mode auto, `--tq {f(p.get('tq_s'), 0)}`, virtual capacity `--gpu-memory "
        f"{f(p.get('capacity_gib'), 0)}GiB`, `--reserve {p.get('reserve_mib', '?')}MiB`. When A is steady, B "
        "(a protocol client, no GPU work, priority 10 against A's 0) attaches the same GPU with a footprint "
        "that fits alone but not beside A, and asks for the lock: A is preempted with EVICT, drains, "
        "moves its W GiB to host in bulk and releases (NVSHARE_EVICT=wait, the default: B's wait holds the move); B is "
        "granted, keeps the GPU max(0.3 s, 0.25 s per GiB) as a holder would for part of a quantum (room "
        "for the move where it runs after the release, NVSHARE_EVICT=background), notes t_rel and releases; A is "
        "granted again with PREFETCH. **Switch** = end of A's first pass that ends after t_rel, minus t_rel: "
        "that pass touches all W GiB, so it ends when the data is back (it includes the scheduler's grant and "
        "one ordinary pass). *Back to full speed*: until a pass takes at most 1.25x the steady pass. *B "
        "waited*: the other direction of the switch (drain, two scheduler hops; the eviction when it comes "
        "before the release). wait = the first "
        "kernels wait for the bulk move back; overlap = they run while it proceeds; off = NVSHARE_PREFETCH=off "
        "and NVSHARE_SWAP=off, the driver's own paging: its migration out, demand faults back (eviction on the "
        "handoff is real in all three). The reference: pinned host-to-device copies of the largest size in "
        "1 GiB pieces, natively (bench/switching/swap_server.py --reference; its time per GiB times W); "
        "demand faults run near 10 GB/s (the facts below), so bulk over demand is bounded near 5x by "
        f"the bus, which is why the goal is the copy. {p.get('cycles', '?')} "
        "cycles per size and variant, one A process per variant; medians. After each size A checks that "
        "every element equals its number of passes (data intact across the evictions). A's first cycle of "
        "each size is cold: the host copy is pinned in the background while the first swap-out goes by the "
        "driver's migration (docs/swapping.md); the medians are the switches after it.\n")


def plot_switch(plt, s: dict):
    rows = numeric_items(s.get("headline"))
    if not rows:
        return None
    groups = [f"{k} GiB" for k, _ in rows]
    series = {"pinned copy, natively": [num(r.get("copy_ms")) for _, r in rows]}
    series.update({f"NVSHARE_PREFETCH={v}": [num(r.get(f"{v}_ms")) for _, r in rows] for v in ("wait", "overlap", "off")})
    return bars(plt, groups, series, "switch ms (log)", "time until A's data is back on the GPU", log=True)


def plot_switch_timeline(plt, s: dict):
    """Pass durations around the first switch of the largest size, per variant."""
    variants = s.get("variants") or {}
    sizes = [k for k, _ in numeric_items(s.get("headline"))]
    if not sizes:
        return None
    size = sizes[-1]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    drawn = False
    for name in ("wait", "overlap", "off"):
        cycles = dig(variants, name, "sizes", size, "cycles") or []
        window = next((c.get("window") for c in cycles if isinstance(c, dict) and c.get("window")), None)
        if not window:
            continue
        # Each pass as a segment from its start to its end, at the height of its duration.
        color = {"wait": "C0", "overlap": "C1", "off": "C2"}[name]
        ax.hlines([end - start for start, end in window], [start for start, _ in window],
                  [end for _, end in window], colors=color, linewidth=2.5, label=f"NVSHARE_PREFETCH={name}")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.axvline(0, color="grey", linestyle="--", linewidth=1, label="B releases (t_rel)")
    ax.set_yscale("log")
    ax.set_xlabel("ms after B released (t_rel); each segment is one pass of A")
    ax.set_ylabel("pass duration ms (log)")
    ax.set_title(f"A's passes around a switch, {size} GiB", fontsize=10)
    ax.legend(fontsize=8, loc="center right")
    return fig


def plot(s: dict, plt) -> dict:
    return {"switch-cost.png": plot_switch(plt, s), "switch-timeline.png": plot_switch_timeline(plt, s)}


if __name__ == "__main__":
    raise SystemExit(main())
