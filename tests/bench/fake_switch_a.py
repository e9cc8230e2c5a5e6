"""A stand-in for bench/switching/switch_cost.py's A process without a GPU, for tests.

It follows A's control-file protocol (progress, steady-*, stop-*, passes-*.json) and speaks to the
scheduler as libnvshare.so would: on DROP_LOCK it "evicts" (sleeps a time proportional to its size
when told EVICT), releases, asks again at once and, granted, "brings its data back" (a short sleep
with PREFETCH unless NVSHARE_PREFETCH=off, a longer one otherwise) inside the pass that was
interrupted. A pass is a short sleep.

    python fake_switch_a.py --sizes 1,2 --control DIR --warm-passes 10 --socket S --uuid GPU-...
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


from bench.core.protoclient import GIB, ProtoClient, prefetch_requested  # noqa: E402
from bench.switching.switch_worker import PROGRESS_BYTES, size_key  # noqa: E402
from xpushare.wire.protocol import DROP_EVICT, MessageType  # noqa: E402

PASS_S = 0.002
EVICT_S_PER_GIB = 0.02
BULK_S_PER_GIB = 0.01
DEMAND_S_PER_GIB = 0.1


def dropped(client: ProtoClient):
    """A DROP_LOCK that has arrived, or None."""
    try:
        frame = client.recv(timeout=0.0005)
    except TimeoutError:
        return None
    if frame.type != MessageType.DROP_LOCK:
        raise RuntimeError(f"unexpected {frame.type.name}")
    return frame.decode()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", required=True)
    p.add_argument("--control", type=Path, required=True)
    p.add_argument("--warm-passes", type=int, default=10)
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--uuid", required=True)
    p.add_argument("--capacity", type=int, default=16 * GIB)
    args = p.parse_args()
    demand = os.environ.get("NVSHARE_PREFETCH") == "off"
    client = ProtoClient(args.socket, priority=0)
    client.attach(args.uuid, capacity=args.capacity, name="fake A")
    fd = os.open(args.control / "progress", os.O_RDWR | os.O_CREAT, 0o644)
    for w in (float(s) for s in args.sizes.split(",")):
        key = size_key(w)
        mem = client.mem_update_frame(int(w * GIB))
        client.lock(prefix=mem)
        passes = []
        while True:
            t0 = time.monotonic()
            drop = dropped(client)
            if drop is not None:
                if drop.flags & DROP_EVICT:
                    time.sleep(w * EVICT_S_PER_GIB)
                client.release(evict_us=int(w * EVICT_S_PER_GIB * 1e6))
                grant = client.lock(timeout=60, prefix=mem)
                back = BULK_S_PER_GIB if prefetch_requested(grant) and not demand else DEMAND_S_PER_GIB
                time.sleep(w * back)
            time.sleep(PASS_S)
            t1 = time.monotonic()
            passes.append((t0, t1))
            os.pwrite(fd, f"{key} {len(passes)} {t1:.6f}".ljust(PROGRESS_BYTES - 1).encode() + b"\n", 0)
            if len(passes) == args.warm_passes:
                (args.control / f"steady-{key}").touch()
            if (args.control / f"stop-{key}").exists():
                break
        client.release()
        out = args.control / f"passes-{key}.json"
        out.with_suffix(".tmp").write_text(json.dumps({"size_gib": w, "passes": passes, "data_ok": True}))
        out.with_suffix(".tmp").rename(out)
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
