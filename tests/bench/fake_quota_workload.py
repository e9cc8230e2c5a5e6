#!/usr/bin/env python3
"""A stand-in for bench/quotas/quota_workload.py without a GPU: the same files and result, with a
throughput taken from $FAKE_IPS (scaled by NVSHARE_COMPUTE_LIMIT / 100 when that is set, and by
$FAKE_GRAPH_IPS / $FAKE_IPS with --graph).

With --trace-every it runs a simulated clock instead: every 10 ms it adds the products of its
current rate and appends a trace point; once the file $FAKE_LIMIT_FILE exists, the limit written in
it applies $FAKE_LAG seconds later (a live change as the scheduler would carry it)."""

import os
import time

from bench.quotas import quota_workload as qw  # noqa: E402

args = qw.parse()
open(args.warm, "w").close()
qw.wait_for(args.go)
ips = float(os.environ.get("FAKE_GRAPH_IPS" if args.graph else "FAKE_IPS", "100"))
limit = float(os.environ.get("NVSHARE_COMPUTE_LIMIT") or 100)
if os.environ.get("NVSHARE_COMPUTE_SHARE"):
    ips *= float(os.environ["NVSHARE_COMPUTE_SHARE"]) / 50
t0 = time.monotonic()
result = {"pid": os.getpid(), "start": t0, "graph": args.graph}
if not args.trace_every:
    time.sleep(args.seconds)
    ips *= limit / 100
    result.update(iterations=int(ips * args.seconds), wall_s=args.seconds, ips=ips)
else:
    limit_file, lag = os.environ.get("FAKE_LIMIT_FILE"), float(os.environ.get("FAKE_LAG", "0"))
    n, last, switch_at, new = 0.0, t0, None, limit
    trace = [[0.0, 0]]
    while last - t0 < args.seconds:
        time.sleep(0.01)
        now = time.monotonic()
        if switch_at is None and limit_file and os.path.exists(limit_file):
            switch_at, new = now + lag, float(open(limit_file).read())
        n += ips * (new if switch_at is not None and now >= switch_at else limit) / 100 * (now - last)
        last = now
        trace.append([now - t0, n])
    result.update(iterations=int(n), wall_s=last - t0, ips=n / (last - t0), trace=trace)
qw.write_result(args.ready, result)
