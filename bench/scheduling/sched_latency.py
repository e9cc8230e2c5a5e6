#!/usr/bin/env python3
"""Lock round trip and grant latency through nvshare-scheduler, against a raw socket baseline.

No GPU is needed: a real scheduler subprocess (--no-nvml) and clients that speak the wire protocol
(bench/core/protoclient.py) on one fake GPU.

1. Uncontended round trip, scheduler in mode auto, one client: MEM_UPDATE + REQ_LOCK in one write
   (what libnvshare.so sends at each lock request) -> LOCK_OK, then LOCK_RELEASED. Per cycle: the
   round trip (REQ_LOCK sent -> LOCK_OK read) and the whole cycle (the time from one REQ_LOCK to the
   next, LOCK_RELEASED included).
2. Grant latency under contention, mode serial: A holds, B has asked and waits; A sends
   LOCK_RELEASED at t0, B reads its LOCK_OK at t1; t1 - t0 per handoff. Then the roles swap (A asks,
   waits a little so that its request is queued, B releases). Both clients live in this process, so
   t0 and t1 are read from one clock.
3. Baseline, in the same run: a raw Unix-socket ping-pong between this process and a second one
   (this file with --serve-baseline) that reads exactly the bytes of the request and writes back the
   bytes of the reply, with the frame sizes of 1 (request 56 bytes, reply 28, then 36 more that get
   no answer) and of 2 (36 bytes -> 28 bytes). It costs what two processes, the kernel and Python
   cost at the least; the scheduler's ratio to it is what decoding, policy and logging add.

p50/p99 over >= 2000 cycles each; garbage collection is off in the timed loops (both sides alike).

    python3 -m bench.scheduling.sched_latency [--quick] [--cycles 5000] [--handoffs 2000] [--json out.json]

run(quick, time_left) returns {"parameters", "uncontended": {"round_trip_us", "cycle_us"},
"contended": {"grant_us"}, "baseline": {"round_trip_us", "cycle_us", "grant_us"}, "ratios":
{name: {"p50", "p99"}}, "samples_us": {...}, "seconds"}; each *_us entry is a summary
{"n", "p50", "p90", "p99", "mean", "min", "max"}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from bench.core.protoclient import GIB, ProtoClient, ProtocolFailure, children_can_import_xpushare  # noqa: E402
from bench.core.stats import percentile, ratio  # noqa: E402
from bench.core.render import bars, dig, error_of, error_row, f, goal_row, num  # noqa: E402

FAKE_UUID = "GPU-00000000-0000-0000-0000-00000000bec0"
CAPACITY = 16 * GIB
CONFIG = struct.Struct("<III")  # baseline connection set-up: request, reply, trailing bytes per cycle
RERUN = "python3 -m bench.scheduling.sched_latency"
NAME = "sched_latency"
TITLE = "Lock round trip and grant latency"
SHARE, MIN_S, GPU = 15, 6, False
PLOTS = {"sched-latency.png": "lock latency through the scheduler vs a raw socket ping-pong"}


# ----------------------------------------------------------------------------- statistics

def summary(values: list[float]) -> dict:
    """n, p50, p90, p99, mean, min, max of samples (None for the statistics of no samples)."""
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "mean": None, "min": None, "max": None}
    s = sorted(values)
    return {"n": len(s), "p50": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99),
            "mean": sum(s) / len(s), "min": s[0], "max": s[-1]}


# ----------------------------------------------------------------------------- the baseline server

def _read_exactly(conn: socket.socket, buf: memoryview) -> bool:
    got = 0
    while got < len(buf):
        n = conn.recv_into(buf[got:])
        if n == 0:
            return False
        got += n
    return True


def serve_baseline(path: Path) -> None:
    """Answer ping-pong connections one after the other until killed: each starts with CONFIG
    (request, reply, trailing bytes), then per cycle reads `request` bytes, writes `reply` bytes and
    reads `trailing` bytes (which get no answer)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bound under another name and renamed once listening: the path appears only when a connect
    # to it is accepted (bind() alone creates the file, and a connect before listen() is refused)
    staging = path.with_name(path.name + ".bound")
    server.bind(str(staging))
    server.listen(4)
    os.rename(staging, path)
    gc.disable()
    while True:
        conn, _ = server.accept()
        with conn:
            head = bytearray(CONFIG.size)
            if not _read_exactly(conn, memoryview(head)):
                continue
            request, reply, trailing = CONFIG.unpack(head)
            req_buf, out, tail = bytearray(request), bytes(reply), bytearray(trailing)
            while _read_exactly(conn, memoryview(req_buf)):
                conn.sendall(out)
                if trailing and not _read_exactly(conn, memoryview(tail)):
                    break


class Baseline:
    """The second process of the baseline, started and ended by this object."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "baseline.sock"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-baseline",
                                      str(self.path)], stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the baseline server did not start")
            time.sleep(0.01)

    def ping_pong(self, request: int, reply: int, trailing: int, cycles: int) -> tuple[list[float], list[float]]:
        """(round trips, whole cycles) in microseconds."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(self.path))
            s.sendall(CONFIG.pack(request, reply, trailing))
            out, tail, back = bytes(request), bytes(trailing), bytearray(reply)
            view = memoryview(back)
            rtts, cycle_times = [], []
            with _no_gc():
                prev = time.perf_counter()
                for _ in range(cycles):
                    t0 = time.perf_counter()
                    s.sendall(out)
                    if not _read_exactly(s, view):
                        raise RuntimeError("the baseline server closed the connection")
                    t1 = time.perf_counter()
                    if trailing:
                        s.sendall(tail)
                    rtts.append((t1 - t0) * 1e6)
                    cycle_times.append((t0 - prev) * 1e6)
                    prev = t0
            return rtts, cycle_times[1:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class _no_gc:
    def __enter__(self):
        self.was = gc.isenabled()
        gc.collect()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


# ----------------------------------------------------------------------------- through the scheduler

def uncontended(sock: Path, cycles: int, footprint: int = GIB) -> tuple[list[float], list[float], dict]:
    """(round trips, whole cycles) in microseconds, and the frame sizes used."""
    with ProtoClient(sock, priority=0) as c:
        c.attach(FAKE_UUID, capacity=CAPACITY)
        mem = c.mem_update_frame(footprint)
        c.lock(prefix=mem)  # the first grant also sets up the GPU's state: not timed
        c.release()
        rtts, cycle_times = [], []
        with _no_gc():
            prev = time.perf_counter()
            for _ in range(cycles):
                t0 = time.perf_counter()
                c.request(mem)
                c.wait_grant()
                t1 = time.perf_counter()
                c.release()
                rtts.append((t1 - t0) * 1e6)
                cycle_times.append((t0 - prev) * 1e6)
                prev = t0
        sizes = {"request": len(mem) + len(c._req_frame), "reply": 12 + 16, "trailing": len(c._release_frame)}
    return rtts, cycle_times[1:], sizes


def contended(sock: Path, handoffs: int, queue_wait_s: float) -> list[float]:
    """Grant latency t1 - t0 in microseconds (mode serial: the waiter runs only after the release)."""
    with ProtoClient(sock, priority=0) as a, ProtoClient(sock, priority=0) as b:
        for c in (a, b):
            c.attach(FAKE_UUID, capacity=CAPACITY)
            c.mem_update(GIB)
        holder, waiter = a, b
        holder.lock()
        waiter.request()
        time.sleep(queue_wait_s)
        latencies = []
        with _no_gc():
            for _ in range(handoffs):
                t0 = time.perf_counter()
                holder.release()
                waiter.wait_grant()
                t1 = time.perf_counter()
                latencies.append((t1 - t0) * 1e6)
                holder, waiter = waiter, holder
                waiter.request()
                # The two connections are read independently: give the request time to be queued
                # before the release it must wait for.
                time.sleep(queue_wait_s)
        holder.release()
    return latencies


def start_scheduler(mode: str, tq: float = 60.0, event_loop: str = "asyncio"):
    """A scheduler subprocess (the GPU harness's helper; it needs no GPU) on a fake GPU only."""
    from bench.core.common import harness

    children_can_import_xpushare()
    return harness.Scheduler(mode=mode, tq=tq, extra_args=("--no-nvml", "--event-loop", event_loop),
                             log_locks=False)


# ----------------------------------------------------------------------------- the benchmark

def plan(quick: bool, time_left: float | None, cycles: int | None = None,
         handoffs: int | None = None) -> dict:
    """Cycle counts: at least 2000 each; fewer than the default when quick or short of time."""
    full_cycles, full_handoffs = (2000, 2000) if quick else (5000, 3000)
    if time_left is not None and time_left < 12:
        full_cycles, full_handoffs = 2000, 2000
    return {"cycles": cycles or full_cycles, "handoffs": handoffs or full_handoffs,
            "queue_wait_s": 0.001}


def ratios(ours: dict, baseline: dict) -> dict:
    return {q: ratio(ours.get(q), baseline.get(q)) for q in ("p50", "p99")}


def measure(cycles: int, handoffs: int, queue_wait_s: float = 0.001, keep_samples: bool = True,
            event_loop: str = "asyncio") -> dict:
    t_begin = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nvs-lat-", dir="/tmp") as tmp:
        base = Baseline(Path(tmp))
        try:
            with start_scheduler("auto", event_loop=event_loop) as sched:
                rtt, cycle, sizes = uncontended(sched.socket, cycles)
            print(f"sched_latency: uncontended p50 {summary(rtt)['p50']:.1f} us", flush=True)
            with start_scheduler("serial", event_loop=event_loop) as sched:
                grant = contended(sched.socket, handoffs, queue_wait_s)
            print(f"sched_latency: handoff p50 {summary(grant)['p50']:.1f} us", flush=True)
            base_rtt, base_cycle = base.ping_pong(sizes["request"], sizes["reply"], sizes["trailing"], cycles)
            base_grant, _ = base.ping_pong(sizes["trailing"], sizes["reply"], 0, handoffs)
        finally:
            base.stop()
    result = {
        "parameters": {"cycles": cycles, "handoffs": handoffs, "queue_wait_s": queue_wait_s,
                       "event_loop": event_loop,
                       "frame_bytes": sizes, "fake_gpu": FAKE_UUID,
                       "modes": {"uncontended": "auto", "contended": "serial"}},
        "uncontended": {"round_trip_us": summary(rtt), "cycle_us": summary(cycle)},
        "contended": {"grant_us": summary(grant)},
        "baseline": {"round_trip_us": summary(base_rtt), "cycle_us": summary(base_cycle),
                     "grant_us": summary(base_grant)},
    }
    result["ratios"] = {
        "round_trip": ratios(result["uncontended"]["round_trip_us"], result["baseline"]["round_trip_us"]),
        "cycle": ratios(result["uncontended"]["cycle_us"], result["baseline"]["cycle_us"]),
        "grant": ratios(result["contended"]["grant_us"], result["baseline"]["grant_us"]),
    }
    if keep_samples:
        result["samples_us"] = {k: [round(v, 2) for v in vs] for k, vs in
                                (("round_trip", rtt), ("grant", grant), ("baseline_round_trip", base_rtt),
                                 ("baseline_grant", base_grant))}
    result["seconds"] = round(time.monotonic() - t_begin, 1)
    return result


def run(quick: bool = False, time_left: float | None = None) -> dict:
    p = plan(quick, time_left)
    result = measure(p["cycles"], p["handoffs"], p["queue_wait_s"])
    result["rerun"] = RERUN + (" --quick" if quick else "")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2000 cycles of each kind")
    p.add_argument("--cycles", type=int, help="uncontended lock cycles (default 5000; >= 2000)")
    p.add_argument("--handoffs", type=int, help="contended handoffs (default 3000; >= 2000)")
    p.add_argument("--queue-wait", type=float, default=0.001, metavar="SECONDS",
                   help="pause after a waiter's REQ_LOCK before the holder releases (default 0.001)")
    p.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="the scheduler's --event-loop (default asyncio, its default)")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--serve-baseline", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_baseline:
        serve_baseline(args.serve_baseline)
        return 0
    for name in ("cycles", "handoffs"):
        value = getattr(args, name)
        if value is not None and value < 2000:
            p.error(f"--{name} must be at least 2000 (p99 needs the samples)")
    if args.queue_wait < 0:
        p.error("--queue-wait must be >= 0")
    params = plan(args.quick, None, args.cycles, args.handoffs)
    try:
        result = measure(params["cycles"], params["handoffs"], args.queue_wait,
                         event_loop=args.event_loop)
    except (ProtocolFailure, TimeoutError, RuntimeError) as e:
        print(f"sched_latency: failed: {e}", file=sys.stderr)
        return 1
    result["rerun"] = " ".join([RERUN, *(argv if argv is not None else sys.argv[1:])])
    for name, key in (("round trip", ("uncontended", "round_trip_us", "round_trip")),
                      ("cycle", ("uncontended", "cycle_us", "cycle")),
                      ("grant", ("contended", "grant_us", "grant"))):
        ours = result[key[0]][key[1]]
        base = result["baseline"][key[1]]
        r = result["ratios"][key[2]]
        print(f"{name:10s} p50 {ours['p50']:8.1f} us  p99 {ours['p99']:8.1f} us   baseline p50 "
              f"{base['p50']:6.1f} p99 {base['p99']:6.1f}   ratio p50 {r['p50']:.2f} p99 {r['p99']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


# ----------------------------------------------------------------------------- its report

def goals(section: dict) -> list[str]:
    if error_of(section):
        return [error_row("lock latency", error_of(section))]
    rows = []
    for label, key, part in (("uncontended lock round trip REQ_LOCK → LOCK_OK", "round_trip", "uncontended"),
                             ("grant latency: LOCK_RELEASED → the waiter's LOCK_OK", "grant", "contended")):
        ours = dig(section, part, f"{key}_us") or {}
        base = dig(section, "baseline", f"{key}_us") or {}
        ratio = dig(section, "ratios", key) or {}
        rows.append(goal_row(label, f"p50 {f(ours.get('p50'))} µs, p99 {f(ours.get('p99'))} µs",
                         f"p50 {f(base.get('p50'))} µs, p99 {f(base.get('p99'))} µs (raw socket ping-pong)",
                         f"{f(ratio.get('p50'), 2)}x / {f(ratio.get('p99'), 2)}x", "—", None))
    return rows


def section(s: dict) -> str:
    lines = ["| measured | through the scheduler p50 / p90 / p99 µs | raw socket baseline p50 / p90 / p99 µs "
             "| ratio p50 | ratio p99 | samples |", "|---|---|---|---:|---:|---:|"]
    for label, part, key in (("REQ_LOCK → LOCK_OK, uncontended (mode auto)", "uncontended", "round_trip"),
                             ("whole cycle REQ_LOCK → LOCK_OK → LOCK_RELEASED", "uncontended", "cycle"),
                             ("LOCK_RELEASED → waiter's LOCK_OK (mode serial)", "contended", "grant")):
        ours = dig(s, part, f"{key}_us") or {}
        base = dig(s, "baseline", f"{key}_us") or {}
        ratio = dig(s, "ratios", key) or {}
        lines.append(f"| {label} | {f(ours.get('p50'))} / {f(ours.get('p90'))} / {f(ours.get('p99'))} | "
                     f"{f(base.get('p50'))} / {f(base.get('p90'))} / {f(base.get('p99'))} | "
                     f"{f(ratio.get('p50'), 2)}x | {f(ratio.get('p99'), 2)}x | {ours.get('n', '—')} |")
    sizes = dig(s, "parameters", "frame_bytes") or {}
    return "\n".join(lines) + (
        "\n\nA real `nvshare-scheduler` (no GPU: `--no-nvml`, one fake GPU attached by the clients) and clients "
        "of the wire protocol (bench/core/protoclient.py). Uncontended: one client, MEM_UPDATE + REQ_LOCK in one "
        "write (as libnvshare.so sends them), LOCK_OK, LOCK_RELEASED. Contended: two clients, mode serial; the "
        "holder releases at t0, the waiter reads its LOCK_OK at t1 (both in one process, one clock); the "
        "roles alternate and each request is queued before the release it waits for. Baseline: a raw "
        "Unix-socket ping-pong with a second process that reads exactly the request's bytes and writes the "
        f"reply's bytes (request {sizes.get('request', '?')} bytes, reply {sizes.get('reply', '?')}, then "
        f"{sizes.get('trailing', '?')} bytes without answer; {sizes.get('trailing', '?')} → "
        f"{sizes.get('reply', '?')} bytes for the grant): what two Python processes and the kernel cost at "
        "the least. The ratio is what frame decoding, the policy and the scheduler's log lines add.\n")


def plot_latency(plt, s: dict):
    groups, ours, base = [], [], []
    for label, part, key in (("round trip p50", "uncontended", "round_trip"),
                             ("round trip p99", "uncontended", "round_trip"),
                             ("grant p50", "contended", "grant"), ("grant p99", "contended", "grant")):
        q = label.split()[-1]
        groups.append(label)
        ours.append(num(dig(s, part, f"{key}_us", q)))
        base.append(num(dig(s, "baseline", f"{key}_us", q)))
    return bars(plt, groups, {"through nvshare-scheduler": ours, "raw socket ping-pong": base}, "µs",
                 "lock latency vs a raw Unix-socket ping-pong")


def plot(s: dict, plt) -> dict:
    return {"sched-latency.png": plot_latency(plt, s)}


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
