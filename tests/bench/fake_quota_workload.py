#!/usr/bin/env python3
"""A stand-in for bench/quota_workload.py without a GPU: the same files and result, with a
throughput taken from $FAKE_IPS (scaled by NVSHARE_COMPUTE_LIMIT / 100 when that is set)."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import quota_workload as qw  # noqa: E402

args = qw.parse()
open(args.warm, "w").close()
qw.wait_for(args.go)
ips = float(os.environ.get("FAKE_IPS", "100"))
if os.environ.get("NVSHARE_COMPUTE_LIMIT"):
    ips *= float(os.environ["NVSHARE_COMPUTE_LIMIT"]) / 100
if os.environ.get("NVSHARE_COMPUTE_SHARE"):
    ips *= float(os.environ["NVSHARE_COMPUTE_SHARE"]) / 50
time.sleep(args.seconds)
with open(args.ready, "w") as fh:
    json.dump({"iterations": int(ips * args.seconds), "wall_s": args.seconds, "ips": ips,
               "pid": os.getpid()}, fh)
