#!/usr/bin/env python3
"""Swapping at the speed of the bus: inference-like servers whose memory does not fit together.

For each size S (GiB of weights per server): two bench/switching/swap_server.py processes under libnvshare.so
and a scheduler in mode auto whose capacity holds one server but not two (--gpu-memory 1.5 x S; the
trial of issue 19 is S = 8 under 12 GiB). Each request reads all S GiB (a GEMV chain) and answers with
the SHA-256 of its outputs. Measured in one run:
1. the reference, natively: pinned host->device and device->host copies of S GiB (1 GiB pieces);
2. resident latency: requests to a server whose memory is on the GPU (before the other one exists,
   and right after its own load);
3. swapped, after one request to each server (the first swap-out of a server moves by the driver's
   prefetch while its host copies are pinned: reported apart as "cold") and once its host copies
   are pinned: requests alternating between the servers --gap seconds apart (each server gives the
   lock back when idle, so every request finds the other server's memory in the way: the scheduler
   asks it to evict, then the requester swaps in), then requests to servers drawn at random.
Each request's moves come from the servers' own debug lines written while it ran: the eviction that
made room (bytes, ms) and the swap-in (bytes, ms). A request's bound is 1.3 x the bus time of those
bytes at the pinned rates of (1) plus the resident p50 of (2); eviction and swap-in bandwidths are
ratios to the pinned copies of (1). The first eviction of a server pins its host copies ("cold") and
is reported apart. After every request the scheduler's status must show the GPU's resident bytes
within its capacity, and every response must equal the server's first, resident one, bit for bit.
With --compare-off, S = 8 runs again with NVSHARE_SWAP=off (the driver's prefetch) for comparison.

With --real the capacity is real: a filler process outside the library (plain cudaMalloc, through
PyTorch) holds all of the GPU's memory but the capacity, so that the servers' memory does not fit
together on the card itself; the GPU's free memory (nvidia-smi) and each server's own (its
per-process line) are read after every request: the server that gave the GPU up must hold no more
than its context. Allowed only because the servers' memory is device memory the library maps itself
(an allocation that finds no room fails, never faults): the run stops if a server says its
allocations are managed memory.

With --pin-ahead-arms each run of the swap store is made twice, with the scheduler's pinning ahead
(PREPARE_SWAP, its default) and with --no-pin-ahead, in an order that alternates by pair and by
repetition (--repeats); in both arms the second server is a newcomer that makes its context first
and loads its weights --load-after seconds (3 s) later, the same fixed delay in both arms
(swap_arms.py says why). What differs is each server's first (cold) eviction: its time and its
ratio to a pinned device->host copy of the bytes it copied, a table of its own per run and arm; the
later switches are the main table's rows, marked "--no-pin-ahead" in the off arm.

GPU safety: refuses to start with less than 48 GiB free; the two servers of the largest size take
at most 2 x S GiB (S <= 18 keeps that under half of an 80 GiB card), every process under the library
has a virtual capacity, and everything is ended on exit.

    python3 -m bench.switching.swap [--sizes 2,8,18] [--requests 8] [--gap 0.5] [--compare-off] [--real]
                                    [--pin-ahead-arms [--repeats N] [--load-after S]] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from bench.core import common
from bench.core.common import harness
from bench.core.gpu_memory import scheduler_status
from bench.switching import swap_arms
from bench.switching.swap_procs import (EVICTED, SERVER, SWAPPED_IN, Filler, Server,  # noqa: F401
                                        gpu_memory_now, reference)

GIB = 1 << 30
BOUND = 1.3
EVICT_GOAL = 0.8


def capacity_for(gib: int) -> int:
    return int((1.5 * gib + (0.5 if gib < 4 else 0)) * GIB)


def resident_bytes(sock: Path) -> tuple[int | None, int]:
    st = scheduler_status(sock) or {}
    gpus = st.get("gpus") or [{}]
    return gpus[0].get("resident_bytes"), gpus[0].get("capacity", 0)


def run_size(gib: int, requests: int, gap: float, swap: bool, rewrite: bool, lib: Path, seed: int,
             logs: Path | None = None, real: bool = False, pin_ahead: bool | None = None,
             load_after: float | None = None, rep: int | None = None) -> dict:
    """One size's sequence. pin_ahead False: the scheduler with --no-pin-ahead (None: its default,
    as True, outside the arms); load_after: the second server starts with only its context and loads
    that many seconds after it attached (swap_arms.py)."""
    h2d_s, d2h_s = reference(gib)
    size = gib * GIB
    rate_in, rate_out = size / h2d_s, size / d2h_s
    cap = capacity_for(gib)
    filler = Filler(cap) if real else None
    sched = harness.Scheduler(mode="auto", extra_args=("--gpu-memory", str(cap),
                                                       *(["--no-pin-ahead"] if pin_ahead is False else [])))
    env = harness.library_env(lib, sched.socket, gpu_memory=str(cap), NVSHARE_IDLE_RELEASE_MS=100,
                              NVSHARE_DEBUG=1, NVSHARE_SWAP="on" if swap else "off")
    servers: list[Server] = []
    result: dict = {"gib": gib, "swap_store": swap, "rewrite": rewrite, "capacity": cap, "real": real,
                    "pin_ahead": pin_ahead, "rep": rep, "free_after_filler": filler.free_after if filler else None,
                    "reference_ms": {"h2d": h2d_s * 1e3, "d2h": d2h_s * 1e3}}
    try:
        resident: list[float] = []
        servers.append(Server("a", gib, env, seed, rewrite))
        resident += [servers[0].request(i)[0] for i in range(6)]
        if real and "converted allocations are managed memory" in servers[0].err_path.read_text():
            raise RuntimeError("the server's allocations are managed memory: no real memory pressure")
        servers.append(Server("b", gib, env, seed + 1, rewrite, wait_before_load=load_after is not None))
        if load_after is not None:
            result["newcomer"] = swap_arms.hold_newcomer(servers[0], servers[1], sched, load_after)
        resident += [servers[1].request(i)[0] for i in range(6)]
        # one request to each: the first swap-out of each server moves by the driver's prefetch
        # ("cold") while its host copies are pinned in the background; measured once they are
        for s in servers:
            s.request(50)
        cold = [(s.name, m) for s in servers for m in s.moves()[0][:1]]
        for s in servers if swap else ():
            s.wait_pinned()
        res_p50 = statistics.median(resident[1:6] + resident[7:])  # the first of each warms up
        rng = random.Random(seed)
        order = [i % 2 for i in range(requests)] + [rng.randrange(2) for _ in range(requests)]
        rows, last = [], None
        for k, who in enumerate(order):
            time.sleep(gap)
            ms, same = servers[who].request(100 + k)
            moves = [s.moves() for s in servers]
            outs = [m for s_out, _ in moves for m in s_out]
            ins = [m for _, s_in in moves for m in s_in]
            moved_in = sum(b for b, _ in ins)
            left, copied = sum(b for b, _, _ in outs), sum(c for _, c, _ in outs)
            bus_s = moved_in / rate_in + copied / rate_out  # clean bytes cost no copy
            res, capacity = resident_bytes(sched.socket)
            free_mib, apps = gpu_memory_now() if real else (None, {})
            rows.append({"free_mib": free_mib,
                         "server_mib": {s.name: apps.get(s.proc.pid) for s in servers},
                         "server": servers[who].name, "pattern": "alternating" if k < requests else "random",
                         "ms": ms, "same": same, "swapped": bool(ins),
                         "moved_in": moved_in, "left": left, "copied_out": copied,
                         "evict_ms": sum(t for _, _, t in outs), "swapin_ms": sum(t for _, t in ins),
                         "one_way_ms": moved_in / rate_in * 1e3,
                         "bound_ms": (BOUND * bus_s * 1e3 + res_p50) if ins else None,
                         "resident_after": res, "capacity": capacity,
                         "repeat": who == last})
            last = who
        result.update(summarise(rows, resident, res_p50, [m for _, m in cold], rate_in, rate_out))
        for entry, (name, _) in zip(result["cold_evictions"], cold):
            entry["server"] = name
    finally:
        for s in servers:
            s.stop()
        result["scheduler_log_tail"] = sched.log()[-3000:]
        result["prepare_swap_lines"] = sched.log().count("prepare-swap")
        if logs:
            tag = f"{gib}g-{'swap' if swap else 'off'}-{'rw' if rewrite else 'ro'}"
            tag += "" if pin_ahead is None else f"-pin{'on' if pin_ahead else 'off'}-r{rep}"
            (logs / f"{tag}-scheduler.log").write_text(sched.log())
            for s in servers:
                (logs / f"{tag}-{s.name}.log").write_text(s.err_path.read_text(errors="replace"))
        sched.stop()
        if filler:
            filler.stop()
    return result


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def summarise(rows, resident, res_p50, cold, rate_in, rate_out) -> dict:
    swapped = [r for r in rows if r["swapped"]]
    # eviction bandwidth: of the evictions that copied (nearly) all they moved out (data written
    # since it came back), the bytes copied over the eviction's whole time; clean ones copy nothing
    # and are timed apart
    evict_ratio = [(r["copied_out"] / (r["evict_ms"] / 1e3)) / rate_out for r in swapped
                   if r["evict_ms"] and r["left"] and r["copied_out"] >= 0.9 * r["left"]]
    clean_ms = [r["evict_ms"] for r in swapped if r["left"] and r["copied_out"] == 0]
    # the stretch: back within 1.3x of its own one-way copy when nothing had to be copied out
    stretch = [r["ms"] / r["one_way_ms"] for r in swapped if r["copied_out"] == 0 and r["one_way_ms"]]
    swapin_ratio = [(r["moved_in"] / (r["swapin_ms"] / 1e3)) / rate_in for r in swapped if r["swapin_ms"]]
    alternating = [r for r in rows if r["pattern"] == "alternating"]
    within = [r["ms"] <= r["bound_ms"] for r in swapped]
    over_cap = [r for r in rows if r["resident_after"] is not None and r["resident_after"] > r["capacity"]]
    # --real: what the server that did not answer (the one that gave the GPU up) still held
    idle_mib = [v for r in rows for name, v in (r.get("server_mib") or {}).items()
                if name != r["server"] and v is not None]
    free_mib = [r["free_mib"] for r in rows if r.get("free_mib") is not None]
    return {
        "idle_server_mib": {"max": max(idle_mib, default=None), "p50": _pct(idle_mib, 0.5), "n": len(idle_mib)},
        "free_mib_after": {"min": min(free_mib, default=None), "max": max(free_mib, default=None)},
        "resident_ms": {"p50": res_p50, "samples": resident},
        "swapped_ms": {"p50": _pct([r["ms"] for r in swapped], 0.5), "p99": _pct([r["ms"] for r in swapped], 0.99),
                       "n": len(swapped)},
        "bound_ms_p50": _pct([r["bound_ms"] for r in swapped], 0.5),
        "latency_over_bound_max": max((r["ms"] / r["bound_ms"] for r in swapped), default=None),
        "evict_ratio": {"p50": _pct(evict_ratio, 0.5), "min": min(evict_ratio, default=None)},
        "swapin_ratio": {"p50": _pct(swapin_ratio, 0.5), "min": min(swapin_ratio, default=None)},
        "cold_evictions": [{"bytes": b, "ms": t, "pinned_ms": c / rate_out * 1e3,
                            "ratio": (c / (t / 1e3)) / rate_out if t else None}
                           for b, c, t in cold],
        "clean_evict_ms": {"p50": _pct(clean_ms, 0.5), "n": len(clean_ms)},
        "stretch_ratio": {"p50": _pct(stretch, 0.5), "max": max(stretch, default=None), "n": len(stretch)},
        "alternating_swapped": sum(r["swapped"] for r in alternating), "alternating_n": len(alternating),
        "all_within_bound": all(within) if within else None,
        "all_identical": all(r["same"] for r in rows),
        "resident_checked": sum(r["resident_after"] is not None for r in rows),
        "resident_over_capacity": len(over_cap),
        "requests": rows,
    }


def rerender(path: Path) -> list[dict]:
    """The results of an earlier run (its --json), summarised again from their requests."""
    results = json.loads(path.read_text())["results"]
    for r in results:
        size = r["gib"] * GIB
        rate_in, rate_out = size / (r["reference_ms"]["h2d"] / 1e3), size / (r["reference_ms"]["d2h"] / 1e3)
        cold = r["cold_evictions"]
        r.update(summarise(r["requests"], r["resident_ms"]["samples"], r["resident_ms"]["p50"], [],
                           rate_in, rate_out))
        r["cold_evictions"] = cold
    return results


def report(results: list[dict]) -> str:
    lines = ["| S GiB | path | data | resident p50 ms | swapped p50 / p99 ms | bound p50 ms | max latency/bound | "
             "evict / pinned D2H | clean evict ms | swap-in / pinned H2D | back / one-way copy (clean) | "
             "cold evict | alternating swaps | identical | resident <= capacity |", "|" + "---|" * 15]
    for r in results:
        f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
        cold = ", ".join(f(c["ratio"], 2) for c in r["cold_evictions"]) or "-"
        path = ("swap store" + (", --no-pin-ahead" if r.get("pin_ahead") is False else "")
                if r["swap_store"] else "driver prefetch")
        lines.append(
            f"| {r['gib']} | {path} | "
            f"{'rewritten' if r['rewrite'] else 'not written'} | {f(r['resident_ms']['p50'])} | "
            f"{f(r['swapped_ms']['p50'])} / {f(r['swapped_ms']['p99'])} | {f(r['bound_ms_p50'])} | "
            f"{f(r['latency_over_bound_max'], 2)} | {f(r['evict_ratio']['p50'], 2)} (min {f(r['evict_ratio']['min'], 2)}) | "
            f"{f(r['clean_evict_ms']['p50'])} | "
            f"{f(r['swapin_ratio']['p50'], 2)} (min {f(r['swapin_ratio']['min'], 2)}) | "
            f"{f(r['stretch_ratio']['p50'], 2)} (max {f(r['stretch_ratio']['max'], 2)}) | {cold} | "
            f"{r['alternating_swapped']}/{r['alternating_n']} | {'yes' if r['all_identical'] else 'NO'} | "
            f"{r['resident_checked'] - r['resident_over_capacity']}/{r['resident_checked']} |")
    for r in results:
        if r.get("real"):
            idle, free = r["idle_server_mib"], r["free_mib_after"]
            lines.append(f"\nS = {r['gib']} GiB, real capacity ({r['free_after_filler'] / GIB:.1f} GiB free beside "
                         f"the filler): the server that gave the GPU up held at most {idle['max']} MiB "
                         f"(p50 {idle['p50']}, {idle['n']} readings); the GPU's free memory after each "
                         f"request {free['min']}-{free['max']} MiB")
    return "\n".join(lines)


def render(results: list[dict]) -> str:
    """The main table, and the arms' own where there are arms."""
    return "\n\n".join(filter(None, [report(results), swap_arms.report(results)]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2,8,18")
    ap.add_argument("--requests", type=int, default=8, help="alternating requests, then as many random")
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--compare-off", action="store_true", help="S = 8 again with NVSHARE_SWAP=off")
    ap.add_argument("--real", action="store_true", help="a filler outside the library makes the capacity real")
    ap.add_argument("--pin-ahead-arms", action="store_true",
                    help="each run with the scheduler's pinning ahead and with --no-pin-ahead (swap_arms.py)")
    ap.add_argument("--repeats", type=int, default=1, help="with --pin-ahead-arms: pairs of arms per run")
    ap.add_argument("--load-after", type=float, metavar="S",
                    help="the second server starts with only its context and loads S seconds after it "
                         f"attached (default with --pin-ahead-arms: {swap_arms.LOAD_AFTER_S:g})")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--logs", type=Path, help="keep the scheduler's and the servers' logs here")
    ap.add_argument("--render", type=Path, metavar="JSON", help="only print the table of an earlier run")
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if max(args.sizes) > 18:
        ap.error("two servers of more than 18 GiB pass half of an 80 GiB card (GPU safety)")
    if args.repeats < 1 or (args.load_after is not None and args.load_after < 0):
        ap.error("--repeats is at least 1 and --load-after at least 0")
    if args.load_after is None and args.pin_ahead_arms:
        args.load_after = swap_arms.LOAD_AFTER_S
    return args


def plan_runs(args: argparse.Namespace) -> list[tuple]:
    """(gib, swap_store, rewrite, pin_ahead, rep) of each run, in order."""
    # each size twice: weights never written (their host copies stay valid after the first swap),
    # and rewritten by every request (every swap-out copies all of it)
    runs = [(s, True, rw) for s in args.sizes for rw in (False, True)]
    runs += [(8, False, True)] if args.compare_off else []
    if args.pin_ahead_arms:
        return swap_arms.arm_plan(runs, args.repeats)
    return [(*run, None, None) for run in runs]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        results = rerender(args.render)
        print(render(results))
        return
    common.require_safe_gpu()
    lib = harness.library_path()
    t0 = time.monotonic()
    results = []
    for gib, swap, rewrite, pin_ahead, rep in plan_runs(args):
        arm = "" if pin_ahead is None else f", pin ahead {'on' if pin_ahead else 'off'} (repetition {rep})"
        common.say("swap", f"S = {gib} GiB, {'swap store' if swap else 'NVSHARE_SWAP=off'}, "
                           f"{'rewritten by each request' if rewrite else 'weights not written'}{arm}")
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
        results.append(run_size(gib, args.requests, args.gap, swap, rewrite, lib, args.seed, args.logs, args.real,
                                pin_ahead, args.load_after, rep))
        print(render(results[-1:]), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"results": results, "seconds": time.monotonic() - t0}, indent=1))
    print(render(results))


if __name__ == "__main__":
    main()
