#!/usr/bin/env python3
"""A stand-in for `python -m torch.distributed.run examples/ddp_train.py` without torch: it takes
torchrun's and ddp_train's arguments and writes the same JSON, with losses that depend only on
--seed and --steps (as the real job's do). $FAKE_DDP_SLEEP: seconds it takes; $FAKE_DDP_DIFFER: a
run id whose losses come out different from step 3 on; $FAKE_DDP_FAIL: a run id that exits 1."""

import argparse
import hashlib
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--nproc-per-node", type=int, required=True)
p.add_argument("--master-port", type=int, required=True)
p.add_argument("--rdzv-id", required=True)
p.add_argument("script")
p.add_argument("--steps", type=int, required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--json-out", required=True)
a = p.parse_args()
time.sleep(float(os.environ.get("FAKE_DDP_SLEEP", "0.1")))
if os.environ.get("FAKE_DDP_FAIL") == a.rdzv_id:
    print("rank 1 failed", file=sys.stderr)
    sys.exit(1)
losses = [2.3 / (1 + 0.01 * a.seed + step) for step in range(a.steps)]
if os.environ.get("FAKE_DDP_DIFFER") == a.rdzv_id:
    losses[3:] = [v + 1e-7 for v in losses[3:]]
sha = hashlib.sha256(json.dumps(losses).encode()).hexdigest()
with open(a.json_out, "w") as out:
    json.dump({"losses": losses, "params_sha256": sha, "seconds": 0.05, "backend": "gloo",
               "world_size": a.nproc_per_node, "run_id": a.rdzv_id, "port": a.master_port}, out)
