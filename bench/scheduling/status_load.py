#!/usr/bin/env python3
"""Status under load: what `status` requests in a loop cost a well-behaved client's lock cycle,
against schedulers started from several source trees in alternating rounds of the same run.

Per tree and round: a scheduler knowing G GPUs (the tests' fake NVML), N connections each attached
to all G, and one victim client on GPU 0 cycling its lock (REQ_LOCK -> LOCK_OK, then release). The
victim's round trips are timed alone (quiet), then while a second process keeps one status request
outstanding on every one of the N connections (loaded). Reported per tree: the victim's p50, p99 and
max in both phases, and the status replies answered per second. The requests come from root, which
no per-uid request budget limits: the loop's cost of building replies, not the refusals, is measured.

--uids U (needs root): the status requests come instead from U processes of U other uids (60001
on), one connection each, asking again as soon as they have their answer (each uid's budget answers
some, the rest are refused at once), while the N connections stay registered and silent; root asks
for status every 0.25 s too, and how long root's replies took is reported (root_status_ms).

--watch DIR: each daemon runs under bench/core/loopwatch.py, its log kept as DIR/<tree>-<round>.log;
each round says how often the loop was held 5 ms or more, the longest hold, and how much of the
holds its thread ran against waited for a CPU (a loop held by a busy machine, not by the scheduler,
waited).

    python3 -m bench.scheduling.status_load [--conns 255] [--gpus 20] [--seconds 5] [--rounds 2]
                                 [--uids U] [--tree NAME=PATH ...] [--json out.json] [--watch DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import selectors
import socket
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.daemon import Daemon, alternating_rounds, checkouts, raise_nofile, report_trees  # noqa: E402
from bench.core.loadgen import read_frame  # noqa: E402
from bench.core.protoclient import GIB, ProtoClient  # noqa: E402
from bench.core.stats import percentile  # noqa: E402
from xpushare.wire.protocol import HEADER, Attach, Hello, MessageType, encode, encode_json  # noqa: E402

REPO = BENCH.parent
LOOPWATCH = (str(BENCH / "core" / "loopwatch.py"),)
HOLD = re.compile(r"loopwatch: loop held ([\d.]+) ms \(from the hold's first sample: its thread ran "
                  r"([\d.]+) ms, waited for a CPU ([\d.]+) ms\)")
SLOW_MS = 5.0  # with --watch, where the time of round trips longer than this went
STATUS = encode_json(MessageType.CTL_REQUEST, {"op": "status"})


def uuid(i: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{i:012x}"


def _registered(path: Path, gpus: int) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    s.sendall(encode(Hello(0, 0, "", "")))
    read_frame(s)
    for d in range(gpus):
        s.sendall(encode(Attach(d, 0, uuid(d), "bench", 16 * GIB, 16 * GIB)))
        read_frame(s)
    return s


def _status_loop(path: str, conns: int, gpus: int, ready, stop, out) -> None:
    """The second process: N registered connections, one status request outstanding on each."""
    socks = [_registered(Path(path), gpus) for _ in range(conns)]
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, bytearray())
    ready.set()
    for s in socks:
        s.sendall(STATUS)
    replies, t0 = 0, time.perf_counter()
    while not stop.is_set():
        for key, _ in sel.select(0.2):
            buf = key.data
            try:
                data = key.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            buf += data
            while len(buf) >= HEADER.size:
                length = HEADER.unpack_from(buf)[3]
                if len(buf) < HEADER.size + length:
                    break
                del buf[:HEADER.size + length]
                replies += 1
                key.fileobj.setblocking(True)
                key.fileobj.sendall(STATUS)
                key.fileobj.setblocking(False)
    out.put(replies / (time.perf_counter() - t0))
    for s in socks:
        s.close()


def _held(path: str, conns: int, gpus: int, ready, stop) -> None:
    """N registered connections that send nothing more (the state status lists)."""
    socks = [_registered(Path(path), gpus) for _ in range(conns)]
    ready.set()
    stop.wait()
    for s in socks:
        s.close()


def _uid_status_loop(path: str, uid: int, stop, out) -> None:
    """Another uid's connection asking for status again as soon as it is answered."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    ok = refused = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        while not stop.is_set():
            s.sendall(STATUS)
            _, payload = read_frame(s)
            if json.loads(payload).get("ok"):
                ok += 1
            else:
                refused += 1
    out.put((ok, refused))


def _root_status(path: str, stop, out) -> None:
    """Root's status every 0.25 s, in a process of its own: a thread of the victim's process reading
    1.8 MB replies would hold the interpreter lock when the victim's grant arrives (up to the
    switch interval, 5 ms), which is the load generator's delay, not the scheduler's."""
    times = []
    while not stop.wait(0.25):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            t0 = time.perf_counter()
            s.connect(path)
            s.sendall(STATUS)
            read_frame(s)
            times.append((time.perf_counter() - t0) * 1e3)
    out.put(times)


def _niced(nice: int, target, *args) -> None:
    """A load process at a lower CPU priority (--load-nice): on a machine with fewer cores than
    load processes they otherwise take the CPUs from the victim and the scheduler alike, and the
    victim's round trips then time the machine, not the scheduler."""
    if nice:
        os.nice(nice)
    target(*args)


def one_round_uids(src: Path, conns: int, gpus: int, seconds: float, uids: int,
                   watch: bool = False, nice: int = 0) -> dict:
    nvml = [{"uuid": uuid(i), "name": "bench GPU", "memory": 16 * GIB} for i in range(gpus)]
    with Daemon("auto", src=src, nvml=nvml, python_args=LOOPWATCH if watch else ()) as d:
        os.chmod(d.dir, 0o755)  # other uids reach the socket
        with ProtoClient(d.socket) as victim:
            victim.attach(uuid(0))
            quiet = _cycles(victim, min(2.0, seconds))
            ctx = multiprocessing.get_context("fork")
            ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
            holder = ctx.Process(target=_niced, args=(nice, _held, str(d.socket), conns, gpus, ready, stop))
            holder.start()
            ready.wait(120)
            askers = [ctx.Process(target=_niced,
                                  args=(nice, _uid_status_loop, str(d.socket), 60001 + i, stop, out))
                      for i in range(uids)]
            for a in askers:
                a.start()
            root_stop, root_out = ctx.Event(), ctx.Queue()
            root = ctx.Process(target=_niced, args=(nice, _root_status, str(d.socket), root_stop, root_out))
            time.sleep(0.2)
            root.start()
            slow = [] if watch else None
            loaded = _cycles(victim, seconds, slow, d.pid)
            root_stop.set()
            root_ms = root_out.get(timeout=60)
            root.join(30)
            stop.set()
            answers = [out.get(timeout=60) for _ in askers]
            for a in [*askers, holder]:
                a.join(30)
    return {"quiet_ms": quiet, "loaded_ms": loaded,
            "status_per_s": sum(a[0] for a in answers) / seconds,
            "refused_per_s": sum(a[1] for a in answers) / seconds, "root_status_ms": root_ms,
            **_watched(d, watch, slow)}


def _watched(d: Daemon, watch: bool, slow: list | None) -> dict:
    """With --watch: the loop's holds of 5 ms or more (held, ran, waited ms), the victim's slow
    round trips (_cycles), and the log."""
    if not watch:
        return {}
    log = d.log()
    return {"holds": [tuple(map(float, m.groups())) for m in HOLD.finditer(log)], "slow": slow,
            "gc_pauses": log.count("loopwatch: gc generation"), "daemon_log": log}


def _cycles(victim: ProtoClient, seconds: float, slow: list | None = None,
            daemon_pid: int | None = None) -> list[float]:
    """The victim's round trips (ms). slow: where the time of those over SLOW_MS went, appended as
    (round trip, the daemon's thread ran, it waited for a CPU, the victim waited for one), in ms,
    from the kernel's schedstat read before and after each cycle."""
    rtts, end = [], time.perf_counter() + seconds
    clocks = None
    if slow is not None:
        clocks = [os.open("/proc/thread-self/schedstat", os.O_RDONLY),
                  os.open(f"/proc/{daemon_pid}/task/{daemon_pid}/schedstat", os.O_RDONLY)]
    while time.perf_counter() < end:
        before = clocks and [_schedstat(fd) for fd in clocks]
        t0 = time.perf_counter()
        victim.lock(timeout=30)
        rtt = (time.perf_counter() - t0) * 1e3
        rtts.append(rtt)
        if clocks and rtt > SLOW_MS:
            (_, mine_waited), (ran, waited) = ((b - a for a, b in zip(x, y))
                                               for x, y in zip(before, map(_schedstat, clocks)))
            slow.append((round(rtt, 2), ran / 1e6, waited / 1e6, mine_waited / 1e6))
        victim.release()
    for fd in clocks or ():
        os.close(fd)
    return rtts


def _schedstat(fd: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting runnable for one) of a thread, from its open schedstat."""
    ran, waited = os.pread(fd, 64, 0).split()[:2]
    return int(ran), int(waited)


def one_round(src: Path, conns: int, gpus: int, seconds: float, watch: bool = False) -> dict:
    nvml = [{"uuid": uuid(i), "name": "bench GPU", "memory": 16 * GIB} for i in range(gpus)]
    with Daemon("auto", src=src, nvml=nvml, python_args=LOOPWATCH if watch else ()) as d:
        with ProtoClient(d.socket) as victim:
            victim.attach(uuid(0))
            quiet = _cycles(victim, min(2.0, seconds))
            ctx = multiprocessing.get_context("fork")
            ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
            p = ctx.Process(target=_status_loop, args=(str(d.socket), conns, gpus, ready, stop, out))
            p.start()
            ready.wait(120)
            time.sleep(0.2)
            slow = [] if watch else None
            loaded = _cycles(victim, seconds, slow, d.pid)
            stop.set()
            rate = out.get(timeout=60)
            p.join(30)
    return {"quiet_ms": quiet, "loaded_ms": loaded, "status_per_s": rate, **_watched(d, watch, slow)}


def _summary(rounds: list[dict]) -> dict:
    def pct(key):
        v = [x for r in rounds for x in r[key]]
        return {"p50": round(percentile(v, 50), 2), "p99": round(percentile(v, 99), 2),
                "max": round(max(v), 2), "cycles": len(v)}
    out = {"quiet_ms": pct("quiet_ms"), "loaded_ms": pct("loaded_ms"),
           "status_per_s": [round(r["status_per_s"], 1) for r in rounds]}
    if "holds" in rounds[0]:
        holds = [h for r in rounds for h in r["holds"]]
        out["holds"] = {"count": len(holds), "longest": max((h[0] for h in holds), default=0.0),
                        "ran_ms": round(sum(h[1] for h in holds), 1),
                        "waited_ms": round(sum(h[2] for h in holds), 1),
                        "gc_pauses": sum(r["gc_pauses"] for r in rounds)}
        slow = [c for r in rounds for c in r["slow"]]
        total = sum(c[0] for c in slow) or 1.0
        out["slow_cycles"] = {  # over SLOW_MS: what share of their time went where
            "count": len(slow), "ms": round(total, 1),
            "daemon_ran": round(sum(c[1] for c in slow) / total, 3),
            "daemon_waited_for_cpu": round(sum(c[2] for c in slow) / total, 3),
            "victim_waited_for_cpu": round(sum(c[3] for c in slow) / total, 3),
            "worst": sorted(slow, reverse=True)[:5]}
    if "root_status_ms" in rounds[0]:
        out["root_status_ms"] = pct("root_status_ms")
        out["refused_per_s"] = [round(r["refused_per_s"], 1) for r in rounds]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conns", type=int, default=255)
    p.add_argument("--gpus", type=int, default=20)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--uids", type=int, default=0, help="status from this many other uids (root only)")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--load-nice", type=int, default=0, metavar="N",
                   help="with --uids: the load's processes at this nice value (the victim and the "
                        "scheduler stay at 0): what is left is the scheduler's, not the machine's")
    p.add_argument("--json", type=Path)
    p.add_argument("--watch", type=Path, metavar="DIR",
                   help="run each daemon under bench/core/loopwatch.py, its log in DIR/<tree>-<round>.log")
    a = p.parse_args(argv)
    if a.watch:
        a.watch.mkdir(parents=True, exist_ok=True)
    raise_nofile()
    trees = checkouts(a.tree) + [("this", REPO / "src")]
    results: dict[str, list] = {name: [] for name, _ in trees}
    for r, (name, src) in alternating_rounds(trees, a.rounds):
        results[name].append(one_round_uids(src, a.conns, a.gpus, a.seconds, a.uids, bool(a.watch),
                                            a.load_nice)
                             if a.uids else one_round(src, a.conns, a.gpus, a.seconds, bool(a.watch)))
        if a.watch:
            (a.watch / f"{name}-{r}.log").write_text(results[name][-1].pop("daemon_log"))
        s = _summary(results[name][-1:])
        print(f"round {r} {name}: loaded p99 {s['loaded_ms']['p99']} ms, max "
              f"{s['loaded_ms']['max']} ms, quiet p99 {s['quiet_ms']['p99']} ms, "
              f"{s['status_per_s'][0]} status/s"
              + (f", root's status p50 {s['root_status_ms']['p50']} max {s['root_status_ms']['max']}"
                 f" ms, {s['refused_per_s'][0]} refused/s" if a.uids else "")
              + (f"; loop held >= 5 ms {s['holds']['count']} times, longest {s['holds']['longest']} ms,"
                 f" ran {s['holds']['ran_ms']} ms, waited for a CPU {s['holds']['waited_ms']} ms,"
                 f" {s['holds']['gc_pauses']} gc pauses; victim's cycles over {SLOW_MS:g} ms:"
                 f" {s['slow_cycles']}" if a.watch else ""), flush=True)
    out = {"conns": a.conns, "gpus": a.gpus, "seconds": a.seconds, "uids": a.uids,
           "load_nice": a.load_nice,
           "trees": {name: _summary(rs) for name, rs in results.items()}}
    return report_trees(out, a.json)


if __name__ == "__main__":
    sys.exit(main())
