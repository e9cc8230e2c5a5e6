#!/usr/bin/env python3
"""Many clients on one GPU: registration, lock round trip and queue handoff at N = 1, 100, 1000
clients, in modes auto, serial and off, against a raw socket baseline measured in the same run.

No GPU is needed: a real nvshare-scheduler subprocess per mode and N (bench/core/daemon.py: --no-nvml,
--gpu-memory 16GiB, --max-connections-per-uid 0, no --log-locks), and N protocol clients of one fake
GPU driven from this one process by one epoll loop (bench/core/loadgen.py). Per mode and N:

1. Registration: connect, HELLO -> WELCOME, ATTACH -> ATTACHED, client after client, the earlier
   ones staying connected: the time of each (does registration cost grow with N?).
2. Lock round trip, REQ_LOCK sent (with its MEM_UPDATE, 1 MiB) -> LOCK_OK read, in a closed loop of
   all N clients: request, release at the grant, think uniform in 0.5..1.5 x N / RATE seconds, so
   that the offered load is about RATE cycles/s at every N (1000: one cycle a second per client at
   N = 1000). N = 1: back to back (no think time) on a blocking socket, the reads and writes of the
   raw socket baseline (loadgen.back_to_back): the one-client goal compares like with like.
3. Burst: every client requests at once, each grant released as soon as it is read; the time to
   serve all N, each client's wait, and per handoff the time from a LOCK_RELEASED sent to the grant
   it let through (serial: the next grant; auto: the grant F places later, F being how many clients
   auto admission lets hold together; off: every request is granted at once, no handoff).
4. Baseline (bench/scheduling/sched_latency.py's server): a raw Unix-socket ping-pong with a second process of
   the same frame sizes: lock cycle 56 -> 28 bytes (+36), grant 36 -> 28 bytes, and for registration
   connect + two round trips of 532 -> 28 bytes (HELLO's size) on a fresh connection.

    python3 -m bench.scheduling.load [--quick] [--sizes 1,100,1000] [--modes auto,serial,off] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path


from bench.core import loadgen  # noqa: E402
from bench.core.daemon import Daemon, raise_nofile  # noqa: E402
from bench.core.gpu_memory import budget_of, counted  # noqa: E402
from bench.scheduling.load_report import goals, section  # noqa: E402,F401  (the module interface of bench/core/suite.py)
from bench.core.protoclient import GIB  # noqa: E402
from bench.scheduling.sched_latency import CONFIG, Baseline, summary  # noqa: E402
from bench.core.stats import ratio  # noqa: E402

NAME = "load"
TITLE = "Many clients on one GPU: registration, lock round trip, queue handoff (no GPU)"
SHARE, MIN_S, GPU, DEFAULT = 300, 60, False, False
RERUN = "python3 -m bench.scheduling.load"
MODES, SIZES = ("auto", "serial", "off"), (1, 100, 1000)
FAKE_UUID = "GPU-00000000-0000-0000-0000-000000000000"
CAPACITY, FOOTPRINT = 16 * GIB, 1 << 20
RATE = 1000.0  # cycles/s the closed loop offers at N > 1 (think time N / RATE)
HELLO_BYTES, REPLY_BYTES = 532, 28


def plan(quick: bool, time_left: float | None = None, sizes=SIZES, modes=MODES) -> dict:
    """Loop seconds per N and burst rounds: the full form takes about 3 minutes on a 2-core machine,
    the quick one about 1; both shrink when the suite gives less time."""
    loop_s = {1: 2.0, 100: 3.0, 1000: 4.0} if quick else {1: 5.0, 100: 10.0, 1000: 20.0}
    rounds = 2 if quick else 5
    scale = 1.0
    if time_left is not None:
        estimate = len(modes) * sum(loop_s.get(n, 10.0) + 2.0 for n in sizes) + 10
        scale = max(0.25, min(1.0, (time_left - 20) / estimate))
    return {"sizes": list(sizes), "modes": list(modes), "rate_per_s": RATE, "rounds": rounds,
            "loop_s": {str(n): round(loop_s.get(n, 10.0) * scale, 1) for n in sizes},
            "footprint_bytes": FOOTPRINT, "gpu_memory": "16GiB"}


def think_s(n: int) -> float:
    return 0.0 if n <= 1 else n / RATE


def admitted_together(mode: str, n: int) -> int | None:
    """How many of the burst's clients hold at once before any release (None: all of them)."""
    if mode == "serial":
        return 1
    if mode == "auto":
        fit = budget_of(CAPACITY) // counted(FOOTPRINT)
        return fit if fit < n else None
    return None


def handoffs(burst: dict, together: int | None) -> list[float]:
    """Per release, the time until the grant it let through: grant k + together in the order read."""
    if together is None:
        return []
    granted = [burst["granted_us"][i] for i in burst["order"]]
    return [granted[k + together] - burst["released_us"][k] for k in range(len(granted) - together)]


def bursts(clients, frames, mode: str, rounds: int) -> dict:
    together = admitted_together(mode, len(clients))
    hand, waits, serve, drops = [], [], [], 0
    for _ in range(rounds):
        b = loadgen.burst(clients, frames)
        hand += handoffs(b, together)
        waits += [g - r for g, r in zip(b["granted_us"], b["requested_us"])]
        serve.append(max(b["granted_us"]) / 1e3)
        drops += b["drops"]
    return {"rounds": rounds, "held_together": together, "handoff_us": summary(hand) if hand else None,
            "wait_us": summary(waits), "serve_all_ms": [round(v, 2) for v in serve],
            "serve_all_ms_max": max(serve), "per_grant_us": min(serve) * 1e3 / len(clients), "drops": drops}


def measure_one(mode: str, n: int, p: dict) -> dict:
    """One scheduler, n clients: registration, the closed loop, the bursts."""
    frames = loadgen.Frames(FAKE_UUID, CAPACITY, FOOTPRINT)
    with Daemon(mode, p["gpu_memory"], ("--max-connections-per-uid", "0")) as daemon:
        clients, reg = loadgen.register(daemon.socket, n, frames)
        try:
            rss_registered = daemon.rss_kib()
            gc.collect()
            gc.disable()  # no collection of the generator's in a timed loop
            try:
                if n == 1:  # back to back on a blocking socket, as the raw socket baseline
                    loop = loadgen.back_to_back(clients[0], frames, p["loop_s"][str(n)])
                else:
                    loop = loadgen.closed_loop(clients, frames, p["loop_s"][str(n)], think_s(n))
                burst = bursts(clients, frames, mode, p["rounds"])
            finally:
                gc.enable()
        finally:
            loadgen.close(clients)
        alive = daemon.alive()
    out = {"registered": len(reg), "registration_us": summary(reg),
           "round_trip_us": summary(loop["rtt_us"]), "cycles": len(loop["rtt_us"]),
           "cycles_per_s": round(len(loop["rtt_us"]) / loop["seconds"], 1), "think_s": think_s(n),
           "open_at_end": loop["late"], "drops": loop["drops"], "burst": burst,
           "rss_kib_registered": rss_registered, "log_problems": daemon.problems(), "alive_at_end": alive}
    print(f"load: {mode} N={n}: registration p99 {out['registration_us']['p99']:.0f} us, round trip p50 "
          f"{out['round_trip_us']['p50']:.0f} p99 {out['round_trip_us']['p99']:.0f} us "
          f"({out['cycles']} cycles), all served in {burst['serve_all_ms_max']:.1f} ms", flush=True)
    return out


def registration_baseline(base: Baseline, n: int) -> list[float]:
    """Connect + CONFIG + two round trips of HELLO's size on a fresh connection, n times."""
    out, back = bytes(HELLO_BYTES), bytearray(REPLY_BYTES)
    times = []
    for _ in range(n):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            t0 = time.perf_counter()
            s.connect(str(base.path))
            s.sendall(CONFIG.pack(HELLO_BYTES, REPLY_BYTES, 0) + out)
            for second in (False, True):
                view, got = memoryview(back), 0
                while got < REPLY_BYTES:
                    got += s.recv_into(view[got:]) or _closed()
                if not second:
                    s.sendall(out)
            times.append((time.perf_counter() - t0) * 1e6)
    return times


def _closed() -> int:
    raise RuntimeError("the baseline server closed the connection")


def baseline(cycles: int = 5000) -> dict:
    with tempfile.TemporaryDirectory(prefix="nvs-load-", dir="/tmp") as tmp:
        base = Baseline(Path(tmp))
        try:
            rtt, _ = base.ping_pong(56, REPLY_BYTES, 36, cycles)
            grant, _ = base.ping_pong(36, REPLY_BYTES, 0, cycles)
            reg = registration_baseline(base, 1000)
        finally:
            base.stop()
    return {"registration_us": summary(reg), "round_trip_us": summary(rtt), "grant_us": summary(grant)}


def adjacent_round_trips(cycles: int = 2000) -> list[float]:
    """The raw socket's lock cycle (56 -> 28 bytes, +36), measured right next to a one-client
    run: this machine's speed drifts within minutes, so the one-client ratio takes this baseline,
    the run's own from before and after it, rather than the one measured at the start."""
    with tempfile.TemporaryDirectory(prefix="nvs-load-", dir="/tmp") as tmp:
        base = Baseline(Path(tmp))
        try:
            return base.ping_pong(56, REPLY_BYTES, 36, cycles)[0]
        finally:
            base.stop()


def add_ratios(entry: dict, base: dict) -> None:
    hand = (entry["burst"]["handoff_us"] or {})
    own = entry.get("adjacent_baseline_round_trip_us")
    pairs = {"registration": (entry["registration_us"], base["registration_us"]),
             "round_trip": (entry["round_trip_us"], own or base["round_trip_us"]),
             "handoff": (hand, base["grant_us"])}
    entry["ratios"] = {k: {q: ratio(ours.get(q), b.get(q)) for q in ("p50", "p99", "max")}
                       for k, (ours, b) in pairs.items()}


def measure(p: dict) -> dict:
    t_begin = time.monotonic()
    nofile = raise_nofile()
    load_start = os.getloadavg()
    base = baseline()
    print(f"load: baseline round trip p50 {base['round_trip_us']['p50']:.1f} us", flush=True)
    modes = {}
    for mode in p["modes"]:
        modes[mode] = {}
        for n in p["sizes"]:
            before = adjacent_round_trips() if n == 1 else []
            entry = measure_one(mode, n, p)
            if n == 1:
                entry["adjacent_baseline_round_trip_us"] = summary(before + adjacent_round_trips())
            add_ratios(entry, base)
            modes[mode][str(n)] = entry
    return {"parameters": {**p, "think_s": {str(n): think_s(n) for n in p["sizes"]},
                           "max_connections_per_uid": 0, "rlimit_nofile": list(nofile), "fake_gpu": FAKE_UUID},
            "baseline": base, "modes": modes,
            "load_average": {"start": [round(v, 2) for v in load_start],
                             "end": [round(v, 2) for v in os.getloadavg()]},
            "seconds": round(time.monotonic() - t_begin, 1)}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    result = measure(plan(quick, time_left))
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def _names(text: str, known, cast=str) -> list:
    values = [cast(v) for v in text.split(",") if v.strip()]
    if known is not None and any(v not in known for v in values):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(map(str, known))}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="shorter loops and 2 burst rounds (about 1 minute)")
    p.add_argument("--sizes", type=lambda t: _names(t, None, int), default=list(SIZES),
                   help="client counts (default 1,100,1000)")
    p.add_argument("--modes", type=lambda t: _names(t, MODES), default=list(MODES),
                   help="scheduler modes (default auto,serial,off)")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if any(n < 1 for n in args.sizes):
        p.error("--sizes must be positive")
    try:
        result = measure(plan(args.quick, None, args.sizes, args.modes))
    except (loadgen.LoadFailure, RuntimeError, OSError) as e:
        print(f"load: failed: {e}", file=sys.stderr)
        return 1
    result["rerun"] = " ".join([RERUN, *(argv if argv is not None else sys.argv[1:])])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(section(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
