"""The fuzz of bench/scheduling/soak.py: testkit/fuzz.py's malformed frames and control requests, sent by worker
threads over many connections.

A malformed frame goes on a connection of its own (the scheduler closes a connection at its first bad
frame, so later ones would never be read), after a valid HELLO + ATTACH for half of them; the sender
then shuts its side down and reads until the scheduler closes. Control requests go 40 to a
connection, all written at once, and every reply is read: each must be ok, or not ok with an error.
Frames and requests are drawn up front from one seeded generator, then sent in shuffled tasks so
that both kinds arrive throughout the run.
"""

from __future__ import annotations

import json
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.core.loadgen import LoadFailure, read_frame
from testkit.fuzz import REGISTER, fuzz_request, malformed_frame, request_frame
from xpushare.wire.protocol import MessageType

FRAMES_PER_TASK = 200
TIMEOUT_S = 10.0


def _connect(sock: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT_S)
    s.connect(str(sock))
    return s


def _frames(sock: Path, frames: list[tuple[bytes, bool]]) -> dict:
    """Each frame on a connection of its own; how they ended."""
    out = {"frames": 0, "closed_by_scheduler": 0, "timeouts": 0, "refused": 0}
    for data, hello in frames:
        try:
            with _connect(sock) as s:
                s.sendall((REGISTER if hello else b"") + data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            out["closed_by_scheduler"] += 1
        except socket.timeout:
            out["timeouts"] += 1
        except OSError:  # reset, or refused when the listen backlog is full: counted, not fatal
            out["refused"] += 1
        out["frames"] += 1
    return out


def _requests(sock: Path, msgs: list[dict]) -> dict:
    """One connection: every request written, every reply read and checked."""
    with _connect(sock) as s:
        s.sendall(b"".join(request_frame(m) for m in msgs))
        bad = 0
        for _ in msgs:
            mtype, payload = read_frame(s)
            if mtype != MessageType.CTL_REPLY:
                raise LoadFailure(f"a control request was answered with {MessageType(mtype).name}: "
                                  f"{payload[:200]!r}")
            reply = json.loads(payload)
            if not (reply.get("ok") is True or (reply.get("ok") is False and reply.get("error"))):
                bad += 1
    return {"requests": len(msgs), "answered": len(msgs), "bad_replies": bad, "request_connections": 1}


def tasks(p: dict, rng: random.Random) -> list[tuple]:
    msgs = [fuzz_request(rng) for _ in range(p["requests"])]
    frames = [(malformed_frame(rng), rng.random() < 0.5) for _ in range(p["frames"])]
    per = p["requests_per_connection"]
    todo = [(_requests, msgs[i:i + per]) for i in range(0, len(msgs), per)]
    todo += [(_frames, frames[i:i + FRAMES_PER_TASK]) for i in range(0, len(frames), FRAMES_PER_TASK)]
    rng.shuffle(todo)
    return todo


def send_all(sock: Path, p: dict, rng: random.Random) -> dict:
    """Send the whole fuzz; the counts of what was sent and how it ended."""
    totals = {"frames": 0, "closed_by_scheduler": 0, "timeouts": 0, "refused": 0, "requests": 0,
              "answered": 0, "bad_replies": 0, "request_connections": 0}
    with ThreadPoolExecutor(p["workers"]) as pool:
        for counts in pool.map(lambda task: task[0](sock, task[1]), tasks(p, rng)):
            for k, v in counts.items():
                totals[k] += v
    totals["frame_connections"] = totals["frames"]
    return totals
