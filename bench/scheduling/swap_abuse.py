#!/usr/bin/env python3
"""Swap protocol abuse: what clients that play the EVICT/RESIDENCY exchange against the others cost
a well-behaved client, against schedulers started from several source trees in alternating rounds
of the same run (--tree NAME=PATH for a baseline: `git worktree add /tmp/base <commit>`).

The victim: a client that does not offer SWAP (10 GiB of a 16 GiB GPU, --tq 1), cycling: ask for
the lock, hold it 100 ms, release, 50 ms idle. Beside it, run by a child under another uid
(nobody, when the benchmark runs as root: what the scheduler keeps per user applies to them as to
a real attacker), each case for --seconds:

- alone: nobody else;
- reparkers: 8 connections that offer SWAP (4 GiB each), take one turn each and then park their
  bytes on the GPU again with an unsolicited RESIDENCY after answering every EVICT at once;
- late answerer: one (8 GiB) that answers each EVICT just under the two-quanta deadline and parks
  its bytes again, and asks for the lock again half a second after each grant (released at once:
  a turn is a grant whose release leaves its bytes parked);
- reconnecting never-answerer: one (8 GiB) that takes such turns, never answers EVICT, and when its
  connection is closed connects again at once.

Reported per tree and case: the victim's grants, their ratio to the victim's grants alone in the
same round, the EVICTs sent, and the bytes the scheduler's log grew by (with --client-log-limit
100/30, the default).

    python3 -m bench.scheduling.swap_abuse [--seconds 20] [--rounds 1] [--tree NAME=PATH ...]
                                           [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/

from bench.core.daemon import Daemon, alternating_rounds, checkouts, report_trees  # noqa: E402
from xpushare.wire.protocol import (  # noqa: E402
    HELLO_SWAP, RESIDENCY_ANSWER, Attach, FrameDecoder, Hello, LockRequest, MemUpdate, MessageType,
    Released, Residency, encode,
)

REPO = BENCH.parent
GiB = 1 << 30
UUID = "GPU-00000000-0000-0000-0000-00000000abce"
TQ = 1.0
NOBODY = 65534
REASK = 0.5  # seconds after a grant the late and the silent attacker ask again
CASES = ("alone", "reparkers", "late_answerer", "reconnecting_never_answerer")


class Peer:
    """One connection speaking the protocol as the library does, with blocking reads."""

    def __init__(self, path: Path, footprint: int, swap: bool):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.decoder = FrameDecoder()
        self.footprint = footprint
        self.sock.sendall(encode(Hello(HELLO_SWAP if swap else 0, 0, "", "")))
        self.expect(MessageType.WELCOME)
        self.sock.sendall(encode(Attach(0, 0, UUID, "abuse benchmark GPU", 16 * GiB, 16 * GiB)))
        self.expect(MessageType.ATTACHED)
        self.sock.sendall(encode(MemUpdate(0, 0, footprint, 0)))

    def next(self, timeout: float | None = None):
        """The next frame, None at EOF; TimeoutError after `timeout` seconds of nothing."""
        self.sock.settimeout(timeout)
        while (frame := self.decoder.next_frame()) is None:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.feed(data)
        return frame

    def expect(self, mtype: MessageType):
        frame = self.next(10.0)
        if frame is None or frame.type != mtype:
            raise RuntimeError(f"expected {mtype.name}, got {frame}")
        return frame

    def send(self, msg) -> None:
        self.sock.sendall(encode(msg))

    def request(self) -> None:
        self.send(LockRequest(0, 0))

    def release(self) -> None:
        self.send(Released(0, 0))

    def answer(self, resident: int) -> None:
        self.send(Residency(0, RESIDENCY_ANSWER, resident, self.footprint - resident, 1000))

    def park(self) -> None:
        """An unsolicited report that all of its bytes are on the GPU again."""
        self.send(Residency(0, 0, self.footprint, 0, 0))

    def close(self) -> None:
        self.sock.close()


# -- the attackers (run in a child under another uid; each returns the EVICTs it was sent) ------
def _until(end: float, fn) -> int:
    evicts = 0
    while time.monotonic() < end:
        try:
            evicts += fn(end)
        except (OSError, RuntimeError):
            time.sleep(0.01)   # closed under it: connect again
    return evicts


def reparker(path: Path, end: float) -> int:
    p = Peer(path, 4 * GiB, swap=True)
    evicts = 0
    try:
        p.request()
        while time.monotonic() < end:
            try:
                frame = p.next(0.2)
            except TimeoutError:
                continue
            if frame is None:
                return evicts
            if frame.type == MessageType.LOCK_OK:
                p.release()
            elif frame.type == MessageType.EVICT:
                evicts += 1
                p.answer(0)
                p.park()
    finally:
        p.close()
    return evicts


def _pester(p: Peer, end: float, on_evict) -> int:
    """Ask for the lock again REASK seconds after each grant (released at once), so that its bytes
    are parked again whenever a release parks them; on_evict(p) answers an EVICT (or not)."""
    evicts, ask_at = 0, None
    p.request()
    while time.monotonic() < end:
        if ask_at is not None and time.monotonic() >= ask_at:
            p.request()
            ask_at = None
        try:
            frame = p.next(0.05)
        except TimeoutError:
            continue
        if frame is None:
            return evicts   # evicted: _until connects again
        if frame.type == MessageType.LOCK_OK:
            p.release()
            ask_at = time.monotonic() + REASK
        elif frame.type == MessageType.EVICT:
            evicts += 1
            on_evict(p)
    return evicts


def _answer_late(p: Peer) -> None:
    time.sleep(2 * TQ - 0.15)   # just under the deadline
    p.answer(0)
    p.park()


def late_answerer(path: Path, end: float) -> int:
    p = Peer(path, 8 * GiB, swap=True)
    try:
        return _pester(p, end, _answer_late)
    finally:
        p.close()


def never_answerer(path: Path, end: float) -> int:
    p = Peer(path, 8 * GiB, swap=True)
    try:
        return _pester(p, end, lambda p: None)
    finally:
        p.close()


ATTACKS = {
    "reparkers": lambda path, end: sum(_threads([lambda: _until(end, lambda e: reparker(path, e))
                                                 for _ in range(8)])),
    "late_answerer": lambda path, end: _until(end, lambda e: late_answerer(path, e)),
    "reconnecting_never_answerer": lambda path, end: _until(end, lambda e: never_answerer(path, e)),
}


def _threads(fns) -> list:
    out = [0] * len(fns)

    def run(i, fn):
        out[i] = fn()
    threads = [threading.Thread(target=run, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def attack_in_child(case: str, path: Path, end: float) -> tuple[int, int]:
    """Fork a child that runs the attack until `end` as uid nobody (when root); (pid, read fd)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            os.write(w, str(ATTACKS[case](path, end)).encode())
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(w)
    return pid, r


def victim(path: Path, start: float, end: float) -> dict:
    """The victim's cycles from `start` to `end`: its grants and its waits for them."""
    p = Peer(path, 10 * GiB, swap=False)
    waits = []
    try:
        while time.monotonic() < start:
            time.sleep(0.01)
        while time.monotonic() < end:
            t0 = time.monotonic()
            p.request()
            while True:
                frame = p.next(max(0.05, end - time.monotonic() + 5))
                if frame is None:
                    raise RuntimeError("the scheduler closed the victim's connection")
                if frame.type == MessageType.LOCK_OK:
                    break
                if frame.type == MessageType.DROP_LOCK:   # answered at once: it is idle
                    continue
            waits.append(time.monotonic() - t0)
            time.sleep(0.1)
            p.release()
            time.sleep(0.05)
    except TimeoutError:
        pass
    finally:
        p.close()
    waits.sort()
    return {"grants": len(waits),
            "wait_p50_ms": round(waits[len(waits) // 2] * 1e3, 1) if waits else None,
            "wait_max_ms": round(waits[-1] * 1e3, 1) if waits else None}


def one_case(src: Path, case: str, seconds: float) -> dict:
    with Daemon("auto", src=src, extra=("--tq", str(int(TQ)))) as d:
        d.dir.chmod(0o755)   # the attackers' uid must reach the socket
        time.sleep(0.3)
        log0 = d.log_path.stat().st_size
        start = time.monotonic() + 1.0   # the attackers' first turns come first
        end = start + seconds
        child = attack_in_child(case, d.socket, end + 0.5) if case != "alone" else None
        got = victim(d.socket, start, end)
        evicts = 0
        if child is not None:
            pid, r = child
            data = b""
            while chunk := os.read(r, 4096):
                data += chunk
            os.close(r)
            os.waitpid(pid, 0)
            evicts = int(data or b"0")
        got.update(evicts=evicts, log_bytes=d.log_path.stat().st_size - log0,
                   problems=d.problems())
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--case", action="append", choices=CASES, help="only these (default: all)")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                   help="a checkout to measure (its src/ is run); this checkout is always measured")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    trees = checkouts(a.tree) + [("this", REPO / "src")]
    cases = a.case or list(CASES)
    if "alone" not in cases:
        cases.insert(0, "alone")
    runs = [(name, src, case) for name, src in trees for case in cases]
    results: dict[str, dict[str, list[dict]]] = {name: {c: [] for c in cases} for name, _ in trees}
    for r, (name, src, case) in alternating_rounds(runs, a.rounds):
        got = one_case(src, case, a.seconds)
        results[name][case].append(got)
        print(f"round {r} {name} {case}: {got}", flush=True)
    out = {"seconds": a.seconds, "rounds": a.rounds, "tq": TQ, "uid": os.geteuid(),
           "trees": {name: summary(per_case) for name, per_case in results.items()}}
    return report_trees(out, a.json)


def summary(per_case: dict[str, list[dict]]) -> dict:
    alone = [r["grants"] for r in per_case["alone"]]
    out = {}
    for case, runs in per_case.items():
        out[case] = {
            "victim_grants": [r["grants"] for r in runs],
            "vs_alone": [round(r["grants"] / g, 3) if g else None for r, g in zip(runs, alone)],
            "wait_p50_ms": [r["wait_p50_ms"] for r in runs],
            "wait_max_ms": [r["wait_max_ms"] for r in runs],
            "evicts": [r["evicts"] for r in runs],
            "log_bytes": [r["log_bytes"] for r in runs],
            "problems": [r["problems"] for r in runs],
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
