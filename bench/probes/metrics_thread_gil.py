#!/usr/bin/env python3
"""Would prometheus_client's own serving meet the scheduler's event-loop budget? Its HTTP server
formats a scrape in a thread of its own; the scheduler's loop then waits for the GIL while that
thread formats. This probe measures the loop's lateness (a 1 ms timer, p99 and max) with no scrape,
and while a thread formats scrapes of N clients' series back to back with prometheus_client's
generate_latest (what its server does per request). The scheduler's own endpoint (httpd.py) formats
on the loop a piece at a time instead (bench/observability/metrics_abuse.py measures it).

    python3 bench/probes/metrics_thread_gil.py [--clients 1000] [--seconds 3]
Prints JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

SERIES = 20  # per client: about what the exporter shows of one (docs/metrics.md)


class Clients:
    def __init__(self, n: int):
        self.n = n

    def collect(self):
        for k in range(SERIES):
            fam = (CounterMetricFamily if k % 2 else GaugeMetricFamily)(
                f"xpushare_probe_series_{k}", "a client series", labels=["client", "pod", "gpu"])
            for c in range(self.n):
                fam.add_metric([str(c), f"ns/pod-{c}", "GPU-0"], float(c))
            yield fam


async def lateness(seconds: float) -> list[float]:
    late, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        await asyncio.sleep(0.001)
        late.append((time.monotonic() - t - 0.001) * 1e3)
    return late


def summary(late: list[float]) -> dict:
    late = sorted(late)
    return {"p50_ms": statistics.median(late), "p99_ms": late[int(len(late) * 0.99)],
            "max_ms": late[-1], "samples": len(late)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    registry = CollectorRegistry()
    registry.register(Clients(args.clients))
    t0 = time.perf_counter()
    size = len(generate_latest(registry))
    one_scrape_ms = (time.perf_counter() - t0) * 1e3
    quiet = asyncio.run(lateness(args.seconds))
    stop, scrapes = threading.Event(), [0]

    def scraper():
        while not stop.is_set():
            generate_latest(registry)
            scrapes[0] += 1

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    busy = asyncio.run(lateness(args.seconds))
    stop.set()
    thread.join()
    print(json.dumps({"clients": args.clients, "series": args.clients * SERIES, "bytes": size,
                      "one_scrape_ms": round(one_scrape_ms, 1), "switch_interval_ms":
                      sys.getswitchinterval() * 1e3, "scrapes_in_thread": scrapes[0],
                      "loop_without_scrapes": summary(quiet), "loop_with_thread_scrapes":
                      summary(busy)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
