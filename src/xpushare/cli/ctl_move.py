"""nvsharectl move PID --to GPU: move a client to another GPU of the node (the scheduler suspends it
whole, then the driver restores it onto the other GPU; docs/suspend.md). By default it waits until
the move ended and says how it ended; --no-wait returns once the scheduler took the order."""

from __future__ import annotations

import sys
import time

from ..inert import inert

WAIT_S = 120.0    # a move the scheduler gives up on says so within its own 30 s; this is a backstop
POLL_S = 0.2


def add_parser(sub, positive_int) -> None:
    mv = sub.add_parser("move", help="move a client to another GPU of the node (admin): suspended "
                                     "whole, restored there by the driver (same chip type only)")
    mv.add_argument("target", type=positive_int, metavar="PID", help="the client's process id")
    mv.add_argument("--to", required=True, metavar="GPU",
                    help="the GPU to move it to: an index, a UUID or a unique UUID prefix")
    mv.add_argument("--no-wait", action="store_true",
                    help="return once the scheduler took the order (status shows how it goes)")


def request(args) -> tuple[str, dict]:
    to = int(args.to) if args.to.isdigit() else args.to
    return "move", {"pid": args.target, "to": to}


def _client(client, pid: int) -> dict | None:
    reply = client.request("status")
    return next((c for c in reply.get("clients", []) if c.get("pid") == pid), None)


def said(client, args, reply: dict) -> int:
    """What nvsharectl prints of a move the scheduler answered; 1 when a client is not moved."""
    failed = 0
    for c in reply.get("clients", []):
        pid = c["pid"]
        if not c.get("moving"):
            print(f"nvsharectl: pid {pid}: not moved: {inert(str(c.get('why')))}", file=sys.stderr)
            failed = 1
            continue
        to = inert(str(c.get("to")))
        if args.no_wait:
            print(f"nvsharectl: pid {pid}: moving to {to} (see nvsharectl status)")
            continue
        failed |= _wait(client, pid, to)
    return failed


def _wait(client, pid: int, to: str) -> int:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        now = _client(client, pid)
        if now is None:
            print(f"nvsharectl: pid {pid}: the client went away during its move", file=sys.stderr)
            return 1
        move = now.get("move") or {}
        if move.get("under_way") is None:
            last = move.get("last") or {}
            if move.get("refused") is None and last.get("to", "").lower() == to.lower():
                print(f"nvsharectl: pid {pid}: moved to {to} in {last.get('seconds')} s")
                return 0
            print(f"nvsharectl: pid {pid}: not moved: {inert(str(move.get('refused')))}", file=sys.stderr)
            return 1
        time.sleep(POLL_S)
    print(f"nvsharectl: pid {pid}: still moving after {WAIT_S:g} s (see nvsharectl status)",
          file=sys.stderr)
    return 1
