"""The pin-ahead arms of bench/switching/swap.py (--pin-ahead-arms): the first switch of each server
with the scheduler's PREPARE_SWAP (its default) and without it (--no-pin-ahead), in one run.

A newcomer is modelled as what a user starts: a process that makes its CUDA context (the library
attaches; the scheduler foresees the swap-out and, in the hint's arm, tells the servers to pin ahead)
and allocates its weights some time later. The second server is started so in both arms, and told to
load a fixed `load_after` seconds after it said ATTACHED, the same in both arms whatever the first
server's pinner did meanwhile: waiting for the pinner's line in one arm only would give the arms
different start-ups, and a user's newcomer does not wait for it either. In the hint's arm the first
server's log is watched meanwhile, for when its pinner said its host copies were pinned ahead (and
how many MiB): a value past `load_after` (or none) means the swap-out came before the pinning ended.

Arms run in pairs, each (size, data) run once with each; which arm goes first alternates from one
pair to the next and from one repetition to the next, so that the host's state (huge pages freed or
still to be compacted by an earlier case) does not favour one arm.
"""

from __future__ import annotations

import statistics
import time

ARMS = (True, False)  # PREPARE_SWAP on (the scheduler's default), --no-pin-ahead
LOAD_AFTER_S = 3.0


def arm_plan(runs: list[tuple[int, bool, bool]], repeats: int) -> list[tuple]:
    """(gib, swap_store, rewrite, pin_ahead, rep) for each run: the swap store's runs in both arms per
    repetition, the first arm alternating by pair and by repetition; a run without the swap store
    (nothing to pin) once, in the default arm (pin_ahead None)."""
    plan = []
    for rep in range(repeats):
        for i, (gib, swap, rewrite) in enumerate(runs):
            if not swap:
                plan += [(gib, swap, rewrite, None, None)] if rep == 0 else []
                continue
            arms = ARMS if (rep + i) % 2 == 0 else ARMS[::-1]
            plan += [(gib, swap, rewrite, arm, rep) for arm in arms]
    return plan


def hold_newcomer(first, newcomer, sched, load_after: float, poll: float = 0.05) -> dict:
    """Let `newcomer` (started with wait_before_load) load `load_after` seconds after it attached,
    watching meanwhile for the first server's copies pinned ahead (seconds after the attach, MiB)."""
    t0 = newcomer.attached_at
    seen_at, mib = None, 0
    while True:
        now = time.monotonic()
        if seen_at is None and (mib := first.pinned_ahead_mib()):
            seen_at = now - t0
        if now >= t0 + load_after:
            break
        time.sleep(min(poll, t0 + load_after - now))
    newcomer.load()
    told = [t - t0 for t, line in list(sched.lines)
            if f"prepare-swap pid={first.proc.pid} " in line and line.endswith(" on")]
    return {"load_after_s": load_after, "pinned_ahead_s": seen_at, "pinned_ahead_mib": mib,
            "pinned_before_load": seen_at is not None, "prepare_swap_s": told[0] if told else None}


def _cold(r: dict, server: str) -> dict | None:
    return next((c for c in r["cold_evictions"] if c.get("server") == server), None)


def report(results: list[dict]) -> str:
    """A row per run of an arm (the first switch of each server) and, per size and data, each arm's
    median over its repetitions."""
    rows = [r for r in results if r.get("pin_ahead") is not None]
    if not rows:
        return ""
    f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731

    def cold(c):
        return "-" if c is None else f"{f(c['ms'], 0)} ms / {f(c.get('pinned_ms'), 0)} ms: {f(c['ratio'])}"
    lines = ["| S GiB | data | pin ahead | rep | b loads after s | a told / pinned ahead: s after b attached (MiB) | "
             "prepare-swap lines | cold evict a: ms / pinned D2H ms: ratio | cold evict b: ms / pinned D2H ms: "
             "ratio | evict / pinned D2H p50 | swap-in / pinned H2D p50 | swapped p50 ms | identical |",
             "|" + "---|" * 13]
    for r in rows:
        n = r.get("newcomer") or {}
        lines.append(
            f"| {r['gib']} | {'rewritten' if r['rewrite'] else 'not written'} | "
            f"{'on' if r['pin_ahead'] else 'off (--no-pin-ahead)'} | {r.get('rep')} | {f(n.get('load_after_s'), 1)} | "
            f"{f(n.get('prepare_swap_s'))} / {f(n.get('pinned_ahead_s'))} ({n.get('pinned_ahead_mib', '-')}) | {r.get('prepare_swap_lines', '-')} | "
            f"{cold(_cold(r, 'a'))} | {cold(_cold(r, 'b'))} | {f(r['evict_ratio']['p50'])} | "
            f"{f(r['swapin_ratio']['p50'])} | {f(r['swapped_ms']['p50'], 1)} | "
            f"{'yes' if r['all_identical'] else 'NO'} |")
    lines.append("")
    for key in sorted({(r["gib"], r["rewrite"]) for r in rows}):
        medians = {}
        for arm in ARMS:
            for server in ("a", "b"):
                got = [c for r in rows if (r["gib"], r["rewrite"]) == key and r["pin_ahead"] is arm
                       for c in [_cold(r, server)] if c and c["ratio"] is not None]
                medians[arm, server] = (statistics.median(c["ratio"] for c in got) if got else None,
                                        statistics.median(c["ms"] for c in got) if got else None, len(got))
        for server in ("a", "b"):
            (on, on_ms, n_on), (off, off_ms, n_off) = medians[True, server], medians[False, server]
            lines.append(f"S = {key[0]} GiB, {'rewritten' if key[1] else 'not written'}, server {server}'s cold "
                         f"eviction / pinned D2H, median: pin ahead on {f(on)} ({f(on_ms, 0)} ms, n {n_on}), "
                         f"off {f(off)} ({f(off_ms, 0)} ms, n {n_off}); off / on time "
                         f"{f(off_ms / on_ms if on_ms and off_ms else None)}")
    return "\n".join(lines)
