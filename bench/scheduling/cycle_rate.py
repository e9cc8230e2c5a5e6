#!/usr/bin/env python3
"""Lock cycles at saturation: N clients of one fake GPU (registered one after the other) each
request the lock again as soon as they have released it, for a few seconds, against schedulers
started from several source trees in alternating rounds of the same run.

Per tree: cycles (REQ_LOCK with its MEM_UPDATE -> LOCK_OK -> LOCK_RELEASED) per second, and the
daemon's CPU microseconds per cycle (Daemon.cpu_s, from just before the loop to its end). No GPU
is needed; the clients are driven from this one process by bench/core/loadgen.py's epoll loop, so
at saturation the two processes share the machine's cores: compare trees, not machines.

    python3 -m bench.scheduling.cycle_rate [--clients 1000] [--mode off] [--seconds 5] [--rounds 4]
                                    [--tree NAME=PATH ...] [--this-with NAME=ARGS ...]
                                    [--profile DIR] [--json out.json]

--profile DIR runs each scheduler under cProfile and leaves DIR/<tree>-<round>.prof.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

from bench.core.daemon import Daemon, alternating_rounds, checkouts, raise_nofile, report_trees
from bench.core.loadgen import Frames, close, closed_loop, register

REPO = Path(__file__).resolve().parents[2]
FAKE_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def one_round(name: str, src: Path, extra: tuple[str, ...], a, profile: Path | None,
              r: int) -> dict:
    python_args = ("-m", "cProfile", "-o", str(profile / f"{name}-{r}.prof")) if profile else ()
    frames = Frames(FAKE_UUID)
    with Daemon(a.mode, src=src, python_args=python_args, extra=extra) as d:
        clients, _ = register(d.socket, a.clients, frames)
        try:
            gc.disable()
            cpu0 = d.cpu_s()
            out = closed_loop(clients, frames, a.seconds, think_s=0.0)
            cpu = d.cpu_s() - cpu0
        finally:
            gc.enable()
            close(clients)
    cycles = len(out["rtt_us"]) + out["late"]
    return {"cycles_per_s": round(cycles / out["seconds"], 1),
            "cpu_us_per_cycle": round(cpu * 1e6 / cycles, 1), "drops": out["drops"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--mode", default="off", choices=("off", "serial", "auto"))
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a checkout to measure (its src/ is run); this checkout is always measured")
    p.add_argument("--this-with", action="append", default=[], metavar="NAME=ARGS",
                   help="also this checkout with these scheduler options, e.g. "
                        "uvloop='--event-loop uvloop'")
    p.add_argument("--profile", type=Path)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    raise_nofile()
    trees = [(name, src, ()) for name, src in checkouts(a.tree)]
    trees += [(t.split("=", 1)[0], REPO / "src", tuple(t.split("=", 1)[1].split()))
              for t in a.this_with]
    trees.append(("this", REPO / "src", ()))
    if a.profile:
        a.profile.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {name: [] for name, _, _ in trees}
    for r, (name, src, extra) in alternating_rounds(trees, a.rounds):
        res = one_round(name, src, extra, a, a.profile, r)
        results[name].append(res)
        print(f"round {r} {name}: {res['cycles_per_s']:.0f} cycles/s, "
              f"{res['cpu_us_per_cycle']:.1f} us daemon CPU per cycle", flush=True)
    out = {"clients": a.clients, "mode": a.mode, "seconds": a.seconds, "rounds": a.rounds,
           "trees": {name: {"cycles_per_s": [x["cycles_per_s"] for x in rs],
                            "cpu_us_per_cycle": [x["cpu_us_per_cycle"] for x in rs]}
                     for name, rs in results.items()}}
    return report_trees(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
