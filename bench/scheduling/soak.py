#!/usr/bin/env python3
"""Soak: 10^5 malformed frames and 10^4 fuzzed control requests against one scheduler, while a
well-behaved probe client takes the lock every 20 ms; the daemon's memory, the probe's grant round
trip and the daemon's log.

No GPU is needed: one nvshare-scheduler subprocess (bench/core/daemon.py: --no-nvml, --gpu-memory 16GiB,
mode auto, no --log-locks). The fuzz comes from testkit/fuzz.py (what tests/scheduler/
test_control_fuzz.py sends, in larger numbers): each malformed frame on a connection of its own, half
of them after a valid HELLO + ATTACH (so that they reach the handlers of a registered client);
the control requests 40 to a connection. Worker threads of this process send them, shuffled together.

The probe, a process of its own (so that the fuzz's threads do not delay its clock readings), is on a
GPU of its own: fuzzed lock traffic (HELLO + ATTACH of testkit's uuid(0), then a mutated REQ_LOCK)
never queues in front of it. The fuzz runs as the scheduler's own uid, which may change settings, so
fuzzed set_mode / set_tq requests do reach the probe's GPU; alone on it, the probe is granted at once
in every mode and under every quantum, so they do not delay it. What they changed is put back at the
end (mode auto, dynamic quantum, the fuzz GPU's capacity override cleared) and the probe must still be
served after that. Its baseline, in the same run: the probe alone before the fuzz starts.

The daemon's RSS (/proc/PID/status VmRSS) is sampled every second; start = just before the fuzz,
end = after it and a settling pause.

    python3 -m bench.scheduling.soak [--quick] [--frames 100000] [--requests 10000] [--json out.json]
                                     [--tree NAME=PATH ... [--rounds 2]] [--watch | --profile DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core import common  # noqa: E402,F401  (xpushare from src/ when it is not installed)
from bench.core.daemon import Daemon, alternating_rounds, checkouts, raise_nofile  # noqa: E402
from bench.core.protoclient import ProtoClient, ctl  # noqa: E402
from bench.scheduling.sched_latency import summary  # noqa: E402
from bench.scheduling.soak_fuzz import send_all  # noqa: E402
from bench.scheduling.soak_report import goals, section  # noqa: E402,F401  (the module interface of bench/core/suite.py)
from testkit.fuzz import uuid  # noqa: E402

NAME = "soak"
TITLE = "Soak: fuzzed frames and control requests against one scheduler (no GPU)"
SHARE, MIN_S, GPU, DEFAULT = 180, 40, False, False
RERUN = "python3 -m bench.scheduling.soak"
PROBE_UUID = "GPU-50a50a50-0000-0000-0000-000000000001"
PERIOD_S = 0.020
QUIET_S, SETTLE_S = 3.0, 3.0  # the probe alone before the fuzz; the pause after it
SEED = 20261124


def plan(quick: bool, time_left: float | None = None, frames: int | None = None,
         requests: int | None = None) -> dict:
    full = (20_000, 2_000) if quick else (100_000, 10_000)
    if time_left is not None and not quick and time_left < 120:  # short of time: a fifth of the fuzz
        full = (20_000, 2_000)
    return {"frames": frames or full[0], "requests": requests or full[1], "requests_per_connection": 40,
            "workers": 4, "probe_period_ms": PERIOD_S * 1e3, "seed": SEED, "mode": "auto",
            "quiet_s": QUIET_S, "settle_s": SETTLE_S}


# ----------------------------------------------------------------------------- the probe

def probe(sock: str, stop, conn) -> None:
    """A lock cycle every PERIOD_S until `stop` is set; sends back (phase marks, samples, failures):
    samples are (time, round trip µs)."""
    samples, failures = [], []
    try:
        with ProtoClient(sock, timeout=10.0) as c:
            c.attach(PROBE_UUID)
            c.mem_update(1 << 30)
            next_t = time.monotonic()
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    c.lock()
                    samples.append((time.monotonic(), (time.perf_counter() - t0) * 1e6))
                    c.release()
                except (TimeoutError, OSError, RuntimeError) as e:
                    failures.append(f"{type(e).__name__}: {e}")
                    break
                next_t += PERIOD_S
                time.sleep(max(0.0, next_t - time.monotonic()))
    except Exception as e:  # reported, not raised: the parent judges
        failures.append(f"{type(e).__name__}: {e}")
    conn.send((samples, failures))
    conn.close()


class Probe:
    def __init__(self, sock: Path) -> None:
        ctx = multiprocessing.get_context("fork")
        self.stop_event = ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=probe, args=(str(sock), self.stop_event, send), daemon=True)
        self.proc.start()

    def finish(self, timeout: float = 20.0) -> tuple[list, list]:
        self.stop_event.set()
        got = self.recv.recv() if self.recv.poll(timeout) else ([], ["the probe sent nothing back"])
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
        return got


# ----------------------------------------------------------------------------- RSS

class RssSampler(threading.Thread):
    def __init__(self, daemon: Daemon, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.d, self.interval = daemon, interval
        self.samples: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def sample(self) -> int | None:
        kib = self.d.rss_kib()
        if kib is not None:
            self.samples.append((time.monotonic(), kib))
        return kib


# ----------------------------------------------------------------------------- the run

def restore(sock: Path) -> dict:
    """Put back what fuzzed admin requests may have changed; each op's reply (True when put back, or
    when there was nothing to put back: the fuzzed GPU was forgotten with its last client)."""
    out = {}
    for op, fields in (("set_mode", {"mode": "auto"}), ("set_tq", {"seconds": "auto"}),
                       ("set_gpu_memory", {"bytes": 0, "gpu": uuid(0)})):
        reply = ctl(sock, op, **fields)
        gone = op == "set_gpu_memory" and "no GPU matches" in str(reply.get("error"))
        out[op] = reply.get("ok") is True or gone or reply.get("error")
    return out


def known_gpus(sock: Path) -> int | str:
    reply = ctl(sock, "status")
    return len(reply["gpus"]) if reply.get("ok") else str(reply.get("error"))


def halves(samples: list[tuple[float, int]], t0: float, t1: float) -> list[int | None]:
    """RSS growth (KiB) in the first and in the second half of [t0, t1]: growth that goes on in the
    second half is not a start-up cost settling."""
    mid = (t0 + t1) / 2

    def at(t: float) -> int | None:
        before = [kib for ts, kib in samples if ts <= t]
        return before[-1] if before else None
    points = [at(t0), at(mid), at(t1)]
    return [None if a is None or b is None else b - a for a, b in zip(points, points[1:])]


def _phase(samples: list, t0: float, t1: float) -> list[float]:
    return [rtt for t, rtt in samples if t0 <= t < t1]


def measure(p: dict, src: Path | None = None, watch: bool = False, profile: Path | None = None) -> dict:
    """src: the package sources to run (another checkout's src/); watch: under bench/core/loopwatch.py,
    whose lines about loop holds are counted from the daemon's log; profile: under cProfile, its
    statistics written to this file (the profiler's cost is in that run's numbers)."""
    t_begin = time.monotonic()
    nofile, load_start = raise_nofile(), os.getloadavg()
    python_args = (str(BENCH / "core" / "loopwatch.py"),) if watch else ()
    if profile is not None:
        python_args = ("-m", "cProfile", "-o", str(profile))
    with Daemon(p["mode"], src=src, python_args=python_args) as daemon:
        sampler = RssSampler(daemon)
        pr = Probe(daemon.socket)
        time.sleep(p["quiet_s"])
        rss_start = sampler.sample()
        t_fuzz = time.monotonic()
        sampler.start()
        sent = send_all(daemon.socket, p, random.Random(p["seed"]))
        t_fuzzed = time.monotonic()
        time.sleep(p["settle_s"])
        restored, gpus = restore(daemon.socket), known_gpus(daemon.socket)
        time.sleep(0.5)  # the probe is served after the restore too
        samples, failures = pr.finish()
        sampler.done.set()
        sampler.join()
        rss_end = sampler.sample()
        alive = daemon.alive()
        daemon.stop()
        log = daemon.log()
    rss = [kib for _, kib in sampler.samples]
    fuzz_rtt = _phase(samples, t_fuzz, t_fuzzed)
    return {
        "parameters": {**p, "probe_uuid": PROBE_UUID, "rlimit_nofile": list(nofile)},
        "sent": sent, "fuzz_seconds": round(t_fuzzed - t_fuzz, 1),
        "rss_kib": {"start": rss_start, "max": max(rss), "end": rss_end, "delta": rss_end - rss_start,
                    "growth_by_half": halves(sampler.samples, t_fuzz, t_fuzzed),
                    "samples": [[round(t - t_fuzz, 1), kib] for t, kib in sampler.samples]},
        "probe": {"round_trip_us": summary(fuzz_rtt), "quiet_us": summary(_phase(samples, 0, t_fuzz)),
                  "after_us": summary(_phase(samples, t_fuzzed, float("inf"))), "cycles": len(samples),
                  "over_10ms": sum(v > 10_000 for v in fuzz_rtt), "failures": failures,
                  # when the slow ones came (s from the fuzz's start), to line them up with RSS and log
                  "slow": [[round(t - t_fuzz, 2), round(v)] for t, v in samples if v > 10_000]},
        "log": {"Traceback": log.count("Traceback"), "internal error": log.count("internal error"),
                "lines": log.count("\n"), "bytes": len(log),
                # GPUs it learnt from ATTACH (the probe's, the fuzz's and those of mutated UUIDs)
                "gpus_learnt": log.count("gpu (made up by a client of uid "),
                "loop_holds": log.count("loopwatch: loop held"),
                "gc_pauses": log.count("loopwatch: gc generation")},
        "daemon_log": log if watch else "", "alive_at_end": alive, "restored": restored, "gpus_known_at_end": gpus,
        "load_average": {"start": [round(v, 2) for v in load_start],
                         "end": [round(v, 2) for v in os.getloadavg()]},
        "seconds": round(time.monotonic() - t_begin, 1)}


def run(quick: bool = False, time_left: float | None = None) -> dict:
    result = measure(plan(quick, time_left))
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20000 frames and 2000 requests")
    ap.add_argument("--frames", type=int, help="malformed frames (default 100000)")
    ap.add_argument("--requests", type=int, help="fuzzed control requests (default 10000)")
    ap.add_argument("--json", type=Path, help="write the result here")
    ap.add_argument("--watch", action="store_true",
                    help="run the daemon under bench/core/loopwatch.py (loop holds in its log)")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="also run another checkout's scheduler, alternating with this one; prints "
                         "the probe's round trips of each")
    ap.add_argument("--rounds", type=int, default=2, help="with --tree: rounds of each")
    ap.add_argument("--keep-log", type=Path, metavar="DIR",
                    help="with --tree --watch: each daemon's log, DIR/<tree>-<round>.log")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="run each daemon under cProfile (not with --watch): DIR/<tree>-<round>.prof")
    args = ap.parse_args(argv)
    if any(v is not None and v < 1 for v in (args.frames, args.requests)):
        ap.error("--frames and --requests must be positive")
    if args.watch and args.profile:
        ap.error("--watch and --profile do not go together")
    if args.tree or args.watch or args.profile:
        return compare(args)
    result = measure(plan(args.quick, None, args.frames, args.requests))
    result["rerun"] = " ".join([RERUN, *(argv if argv is not None else sys.argv[1:])])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(section(result))
    return 0


def compare(args) -> int:
    """The fuzz against schedulers from several source trees, alternating: the probe's round trip
    during the fuzz (p50, p99, max, cycles over 10 ms) per tree and round."""
    trees = checkouts(args.tree) + [("this", BENCH.parent / "src")]
    p = plan(args.quick, None, args.frames, args.requests)
    out: dict[str, list] = {name: [] for name, _ in trees}
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    for r, (name, src) in alternating_rounds(trees, args.rounds):
        res = measure(p, src=src, watch=args.watch,
                      profile=args.profile / f"{name}-{r}.prof" if args.profile else None)
        rt = res["probe"]["round_trip_us"]
        row = {"p50_us": rt.get("p50"), "p99_us": rt.get("p99"), "max_us": rt.get("max"),
               "cycles": rt["n"], "over_10ms": res["probe"]["over_10ms"],
               # the fuzz is sent as fast as it is answered: a faster scheduler gets it faster
               "fuzz_s": res["fuzz_seconds"], "frames_per_s": round(res["sent"]["frames"] / res["fuzz_seconds"]),
               "loop_holds": res["log"]["loop_holds"], "gc_pauses": res["log"]["gc_pauses"],
               "requests": res["sent"]["requests"], "answered": res["sent"]["answered"],
               "bad_replies": res["sent"]["bad_replies"], "alive": res["alive_at_end"]}
        out[name].append(row)
        if args.keep_log:
            args.keep_log.mkdir(parents=True, exist_ok=True)
            (args.keep_log / f"{name}-{r}.log").write_text(res["daemon_log"])
        print(f"round {r} {name}: {row}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"parameters": p, "trees": out}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
