#!/usr/bin/env python3
"""Scrapes against grants: what /metrics scrapes of a large state cost a well-behaved client's lock
cycle, against schedulers started from several source trees in alternating rounds of the same run.

Per tree and round: one scheduler (bench/core/daemon.py: --no-nvml, mode auto, --metrics-port on
127.0.0.1) with CLIENTS protocol clients attached to one GPU (an answer of about 12 MB), and a
probe on a GPU of its own cycling its lock every 20 ms (bench/scheduling/soak.py's Probe, a process
of its own). Phases of PHASE_S seconds each: quiet (no scrape); one scraper asking back to back;
8 scrapers from one address; 32 scrapers from 32 addresses (127.0.0.1-32), each back to back.
Reported per tree and phase: the probe's round trip p50, p99 and max, and the answers the scrapers
got (200s, other outcomes). Scrapers are threads of this process; they and the scheduler share the
machine's cores, as a scraper on the node would.

    python3 -m bench.scheduling.scrape_load [--clients 5000] [--rounds 2] [--tree NAME=PATH ...]
                                    [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import socket
import sys
import threading
import time
from pathlib import Path

from bench.core.daemon import Daemon, alternating_rounds, checkouts, raise_nofile, report_trees
from bench.core.loadgen import Frames, close, register
from bench.core.stats import percentile
from bench.scheduling.soak import Probe

REPO = Path(__file__).resolve().parents[2]
GPU = "GPU-00000000-0000-0000-0000-000000000000"
PHASE_S = 6.0
PHASES = (("quiet", 0, 1), ("1 scraper", 1, 1), ("8 scrapers, 1 address", 8, 1),
          ("32 scrapers, 32 addresses", 32, 32))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scraper(port: int, source: str, stop: threading.Event, got: list) -> None:
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                          source_address=(source, 0))
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            size = len(r.read())
            got.append(str(r.status) if size or r.status != 200 else "empty")
        except (OSError, http.client.HTTPException) as e:
            got.append(type(e).__name__)
            stop.wait(0.05)
        finally:
            conn.close()


def one_round(src: Path, clients: int) -> dict:
    port = _free_port()
    with Daemon("auto", src=src, extra=("--metrics-port", str(port),
                                        "--metrics-address", "127.0.0.1")) as d:
        crowd, _ = register(d.socket, clients, Frames(GPU), timeout=60)
        try:
            probe = Probe(d.socket)
            time.sleep(1.0)
            marks, answers = [], {}
            for name, scrapers, addresses in PHASES:
                stop, got = threading.Event(), []
                threads = [threading.Thread(target=_scraper, daemon=True,
                                            args=(port, f"127.0.0.{1 + i % addresses}", stop, got))
                           for i in range(scrapers)]
                t0 = time.monotonic()
                for t in threads:
                    t.start()
                time.sleep(PHASE_S)
                marks.append((name, t0, time.monotonic()))
                stop.set()
                for t in threads:
                    t.join(40)
                answers[name] = {k: got.count(k) for k in sorted(set(got))}
                time.sleep(0.5)
            samples, failures = probe.finish()
        finally:
            close(crowd)
    out = {}
    for name, t0, t1 in marks:
        ms = [us / 1e3 for t, us in samples if t0 <= t < t1]
        out[name] = {"p50_ms": round(percentile(ms, 50), 2) if ms else None,
                     "p99_ms": round(percentile(ms, 99), 2) if ms else None,
                     "max_ms": round(max(ms), 2) if ms else None, "cycles": len(ms),
                     "answers": answers[name]}
    return {"phases": out, "probe_failures": failures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a checkout to measure (its src/ is run); this checkout is always measured")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    raise_nofile()
    trees = checkouts(a.tree) + [("this", REPO / "src")]
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for r, (name, src) in alternating_rounds(trees, a.rounds):
        res = one_round(src, a.clients)
        results[name].append(res)
        for phase, row in res["phases"].items():
            print(f"round {r} {name} {phase}: p50 {row['p50_ms']} p99 {row['p99_ms']} "
                  f"max {row['max_ms']} ms ({row['cycles']} cycles) {row['answers']}", flush=True)
    out = {"clients": a.clients, "rounds": a.rounds, "phase_s": PHASE_S,
           "trees": {name: [r["phases"] for r in rs] for name, rs in results.items()}}
    return report_trees(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
