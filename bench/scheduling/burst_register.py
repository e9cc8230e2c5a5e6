#!/usr/bin/env python3
"""Burst registration: N clients connect at once (connect, HELLO and ATTACH written back to back
on every socket before any answer is read), against schedulers started from several source trees
in alternating rounds of the same run, so a baseline commit and this checkout are measured side by
side on the same machine.

Per tree: each client's time from its connect to its ATTACHED read (p50, p99, max over all
rounds), and the daemon's CPU seconds (user + system: Daemon.cpu_s) per 1000 registrations,
taken from just before the first connect to the last ATTACHED (before the sockets close, so the
disconnects that follow are not counted). Baseline trees come from
`git worktree add /tmp/base-loop <commit>`.

    python3 -m bench.scheduling.burst_register [--clients 1000] [--rounds 4] [--tree NAME=PATH ...]
                                    [--this-with NAME=ARGS ...] [--profile DIR] [--json out.json]

--profile DIR runs each scheduler under cProfile and leaves DIR/<tree>-<round>.prof (profiled
rounds time the profiler too: use them to find where the time goes, not for the numbers).
"""

from __future__ import annotations

import argparse
import selectors
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.daemon import Daemon, alternating_rounds, checkouts, raise_nofile, report_trees  # noqa: E402
from bench.core.loadgen import Frames, LoadFailure  # noqa: E402
from bench.core.stats import percentile  # noqa: E402
from xpushare.wire.protocol import HEADER, MessageType  # noqa: E402

REPO = BENCH.parent
FAKE_UUID = "GPU-00000000-0000-0000-0000-000000000000"
ATTACHED, ERROR = int(MessageType.ATTACHED), int(MessageType.ERROR)


def burst(path: Path, n: int, frames: Frames, timeout: float = 60.0,
          at_last: Callable[[], object] = lambda: None) -> list[float]:
    """Each client's connect -> ATTACHED, in ms. at_last() is called when the last ATTACHED has
    been read, before any socket is closed (the daemon's disconnects are no part of a burst)."""
    socks, t0 = [], []
    sel = selectors.DefaultSelector()
    first = frames.hello + frames.attach
    try:
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            t0.append(time.perf_counter())
            s.connect(str(path))  # blocks only while the listen backlog is full
            s.sendall(first)
            s.setblocking(False)
            socks.append(s)
            sel.register(s, selectors.EVENT_READ, (i, bytearray()))
        done: dict[int, float] = {}
        deadline = time.perf_counter() + timeout
        while len(done) < n:
            if time.perf_counter() > deadline:
                raise LoadFailure(f"only {len(done)} of {n} clients registered in {timeout:.0f} s")
            for key, _ in sel.select(1.0):
                t = time.perf_counter()
                i, buf = key.data
                data = key.fileobj.recv(65536)
                if not data:
                    raise LoadFailure(f"client {i}: the scheduler closed the connection")
                buf += data
                while len(buf) >= HEADER.size:
                    mtype, length = HEADER.unpack_from(buf)[2:]
                    if len(buf) < HEADER.size + length:
                        break
                    if mtype == ERROR:
                        raise LoadFailure(f"client {i}: {bytes(buf[HEADER.size:]).decode(errors='replace')}")
                    if mtype == ATTACHED:
                        done[i] = (t - t0[i]) * 1e3
                        sel.unregister(key.fileobj)
                    del buf[:HEADER.size + length]
        at_last()
        return [done[i] for i in range(n)]
    finally:
        sel.close()
        for s in socks:
            s.close()


def one_round(name: str, src: Path, n: int, frames: Frames, profile: Path | None, r: int,
              extra: tuple[str, ...] = ()) -> dict:
    python_args = ("-m", "cProfile", "-o", str(profile / f"{name}-{r}.prof")) if profile else ()
    # Run as root (the per-uid connection cap exempts it; older trees lack the flag).
    with Daemon("auto", src=src, python_args=python_args, extra=extra) as d:
        time.sleep(0.3)  # let start-up finish before the CPU reading
        cpu = [d.cpu_s()]
        times = burst(d.socket, n, frames, at_last=lambda: cpu.append(d.cpu_s()))
    return {"ms": times, "cpu_s_per_1000": (cpu[1] - cpu[0]) * 1000.0 / n}


def summary(per_round: list[dict]) -> dict:
    ms = [t for r in per_round for t in r["ms"]]
    cpu = [r["cpu_s_per_1000"] for r in per_round]
    return {"p50_ms": round(percentile(ms, 50), 1), "p99_ms": round(percentile(ms, 99), 1),
            "max_ms": round(max(ms), 1), "p99_ms_per_round": [round(percentile(r["ms"], 99), 1)
                                                              for r in per_round],
            "cpu_s_per_1000": [round(c, 3) for c in cpu],
            "cpu_s_per_1000_min_max": [round(min(cpu), 3), round(max(cpu), 3)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a checkout to measure (its src/ is run); this checkout is always measured")
    p.add_argument("--this-with", action="append", default=[], metavar="NAME=ARGS",
                   help="also this checkout with these scheduler options, e.g. "
                        "asyncio='--event-loop asyncio'")
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
    frames = Frames(FAKE_UUID)
    results: dict[str, list[dict]] = {name: [] for name, _, _ in trees}
    for r, (name, src, extra) in alternating_rounds(trees, a.rounds):
        results[name].append(one_round(name, src, a.clients, frames, a.profile, r, extra))
        print(f"round {r} {name}: p99 {percentile(results[name][-1]['ms'], 99):.1f} ms, "
              f"cpu {results[name][-1]['cpu_s_per_1000']:.3f} s/1000", flush=True)
    out = {"clients": a.clients, "rounds": a.rounds,
           "trees": {name: summary(rs) for name, rs in results.items()}}
    return report_trees(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
