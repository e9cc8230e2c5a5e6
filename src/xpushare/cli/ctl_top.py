"""nvsharectl top: the scheduler's status, redrawn every --interval seconds until q or Ctrl-C.

Each frame is one `status` request. What status does not carry (how many grants a client got, how
long a waiter has waited, each client's GPU busy share) is derived from the changes between frames
and shown as "—" until two frames have been seen. Busy is the client's GPU busy time (what its
library reports, `gpu_busy_seconds`, summed over its GPUs) gained since the previous frame over
the wall time between them: 100% is one GPU kept busy. --once and --json take two status samples
--interval apart for it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from rich.console import Group
from rich.text import Text

from .ctl_render import (
    JOB_WIDTH, Column, client_bytes, duration, fitted_table, gpu_state_cell, gpu_title, label_gpus,
    last_switch_cell, make_console, quota_cell, size_or_dash, without_job, wrap_hanging,
)
from . import ctl_fit
from .ctl_fit import height_of
from .ctl_keys import KeyReader
from ..inert import inert_tree
from ..wire.sizes import format_size

NONE = "—"  # the scheduler does not report it (yet)
NBSP = "\u00a0"  # wrap_hanging breaks no line there, and prints it as a space
STATE_ORDER = {"holding": 0, "waiting": 1, "idle": 2}
INTERVAL_MIN, INTERVAL_MAX = 0.1, 3600.0


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not INTERVAL_MIN <= value <= INTERVAL_MAX:  # nan fails too
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}: seconds from {INTERVAL_MIN:g} "
                                         f"to {INTERVAL_MAX:g}")
    return value


def add_parser(sub, positive_int) -> None:
    t = sub.add_parser("top", help="a live view of GPUs and clients (q or Ctrl-C leaves)")
    t.add_argument("--interval", type=_interval, default=2.0, metavar="SECONDS",
                   help="seconds between frames (default 2)")
    once = t.add_mutually_exclusive_group()
    once.add_argument("--once", action="store_true", help="print one frame and exit")
    once.add_argument("--json", action="store_true", help="print one frame as JSON and exit")
    t.add_argument("--width", type=positive_int, metavar="COLUMNS",
                   help="lay the frame out for this many columns (default: the terminal's)")
    t.add_argument("--height", type=positive_int, metavar="LINES",
                   help="fit the frame to this many lines (default: the terminal's; --once: all)")


class Tracker:
    """What one frame alone does not tell: grants seen and when each waiter started waiting."""

    def __init__(self):
        self.frames = 0
        self.seen: dict[int, tuple[str, float]] = {}  # client_id -> (state, held_for)
        self.waiting_since: dict[int, float] = {}
        self.grants: dict[int, int] = {}
        self.busy: dict[int, tuple[float, float]] = {}  # client_id -> (busy seconds, when seen)
        self.busy_share: dict[int, float] = {}          # client_id -> over the last interval

    def sample_busy(self, status: dict, now: float) -> None:
        """The clients' busy time now; the share of each since the previous sample."""
        seen, shares = {}, {}
        for c in status.get("clients", []):
            values = [d["gpu_busy_seconds"] for d in c.get("gpus", []) if "gpu_busy_seconds" in d]
            if not values:
                continue  # a scheduler that does not report it
            cid = c["client_id"]
            seen[cid] = (sum(values), now)
            before = self.busy.get(cid)
            if before is not None and now > before[1]:
                shares[cid] = max(0.0, seen[cid][0] - before[0]) / (now - before[1])
        self.busy, self.busy_share = seen, shares

    def busy_of(self, cid: int) -> str:
        share = self.busy_share.get(cid)
        return NONE if share is None else f"{share * 100:.0f}%"

    def update(self, status: dict, now: float) -> None:
        self.sample_busy(status, now)
        held = _held_for(status)
        seen = {}
        for c in status.get("clients", []):
            cid, state = c["client_id"], c["state"]
            before = self.seen.get(cid)
            seen[cid] = (state, held.get(cid, 0.0))
            if self.frames == 0:
                continue  # the first frame shows where clients are, not what changed
            if state == "holding" and (before is None or before[0] != "holding"
                                       or seen[cid][1] < before[1]):
                self.grants[cid] = self.grants.get(cid, 0) + 1  # a new grant, or a fresh quantum
            if state == "waiting" and (before is None or before[0] != "waiting"):
                self.waiting_since[cid] = now
        self.waiting_since = {k: v for k, v in self.waiting_since.items()
                              if seen.get(k, ("",))[0] == "waiting"}
        self.seen = seen
        self.frames += 1

    def grants_of(self, cid: int) -> str:
        return NONE if self.frames < 2 else str(self.grants.get(cid, 0))

    def wait_of(self, cid: int, now: float) -> str:
        since = self.waiting_since.get(cid)
        return NONE if since is None else duration(now - since)


def _held_for(status: dict) -> dict[int, float]:
    held: dict[int, float] = {}
    for g in status.get("gpus", []):
        for h in g["holders"]:
            held[h["client_id"]] = max(held.get(h["client_id"], 0.0), h["held_for"])
    return held


def client_label(c: dict) -> str:
    pod = c.get("pod")
    return f"{pod['namespace']}/{pod['name']}" if pod else str(c["pid"])


def ordered_clients(clients: list[dict]) -> list[dict]:
    """Holders first, then waiters, then idle; higher priority first within each."""
    return sorted(clients, key=lambda c: (STATE_ORDER.get(c["state"], 3), -c.get("priority", 0),
                                          c["pid"], c["client_id"]))


def _gpu_footprints(status: dict) -> dict[str, int]:
    """Per GPU the bytes its clients told it: those listed, and other users' that a non-admin's
    status counts without listing (other_users_bytes)."""
    total: dict[str, int] = {g["uuid"]: g["other_users_bytes"] for g in status.get("gpus", [])
                             if g.get("other_users_bytes")}
    for c in status.get("clients", []):
        for d in c["gpus"]:
            total[d["uuid"]] = total.get(d["uuid"], 0) + d["managed_bytes"] + d["other_bytes"]
    return total


def memory_bar(used: int, footprint: int, capacity: int | None, width: int) -> str:
    """[███▒▒····]: the holders' counted bytes, the other clients' footprints, what is left."""
    if not capacity:
        return "[" + "?" * width + "]"
    held = min(width, round(width * used / capacity))
    rest = min(width - held, round(width * max(0, footprint - used) / capacity))
    return "[" + "█" * held + "▒" * rest + "·" * (width - held - rest) + "]"


def _memory_tail(g: dict, footprint: int) -> str:
    cap = g.get("capacity")
    over = f" ×{footprint / cap:.1f}" if cap and footprint > cap else ""
    phys = f", physical {format_size(g['memory_total'])}" if g.get("memory_total") else ""
    swap = (f"; resident {format_size(g['resident_bytes'])}, swapped "
            f"{format_size(g.get('swapped_bytes') or 0)}" if "resident_bytes" in g else "")
    return (f" clients {format_size(footprint)}{over} of {format_size(cap) if cap else '?'}"
            f"{phys}; holders {format_size(g.get('used') or 0)}{swap}")


def _gpu_head(g: dict, width: int) -> str:
    """GPU 0  NAME  MODE: OPERATION  TQ 5s auto  switch 72 ms[  UUID]; a label and its value are
    kept on one line (non-breaking spaces) when it wraps."""
    cost = g.get("switch_cost")
    tq = f"{g['tq']:g}s{' auto' if g.get('tq_source') == 'dynamic' else ''}"
    head = (f"{gpu_title(g)}  {g['name'] or '?'}  {g['mode']}: {g.get('operation', '?')}  "
            f"TQ {tq}  switch {f'{cost * 1000:.0f} ms' if cost else NONE}")
    if len(head) + 2 + len(g["uuid"]) <= width:
        head += f"  {g['uuid']}"
    return head.replace(f"TQ {tq}", f"TQ{NBSP}{tq.replace(' ', NBSP)}").replace("switch ", f"switch{NBSP}")


def _gpu_sections(g: dict, footprint: int, width: int, bar_width: int) -> list[list[Text]]:
    """A GPU's lines by section (its head, memory, last switch, why), each section's wrapped."""
    head = _gpu_head(g, width)
    bar = memory_bar(g.get("used") or 0, footprint, g.get("capacity"), bar_width)
    tail = _memory_tail(g, footprint)
    # Each wrapped with a hanging indent under its label, no number parted from its unit.
    texts = [(head, 2, "bold"), (f"  mem {bar}{tail}", 6, "")]
    if g.get("last_switch"):
        ago = g["last_switch"].get("ago")
        texts.append((f"  last switch: {last_switch_cell(g, ', ')}"
                      f"{f' ({duration(ago)} ago)' if ago is not None else ''}", 4, ""))
    if g.get("why"):
        texts.append((f"  why: {g['why']}", 7, ""))
    return [[Text(line, style=style, overflow="fold") for line in wrap_hanging(text, width, indent)]
            for text, indent, style in texts]


TOP_COLUMNS = [Column("Client", 1), Column("PID", 8), Column("Priority", 3), Column("State", 2),
               Column("Job", 5, free=True, limit=JOB_WIDTH),
               Column("GPU", 9, wrap=True), Column("Memory", 4), Column("Swapped", 13),
               Column("Held", 7), Column("Wait", 6), Column("Grants", 10), Column("Busy", 11),
               Column("Quota", 12, wrap=True)]


def _client_row(c: dict, held: dict[int, float], tracker: Tracker, now: float) -> list[str]:
    gpus = " ".join(gpu_state_cell(d) for d in c["gpus"])
    cid = c["client_id"]
    return [client_label(c), str(c["pid"]), str(c.get("priority", 0)), c["state"],
            c.get("job") or "-", gpus or "-",
            format_size(client_bytes(c)), size_or_dash(client_swapped(c)),
            duration(held[cid]) if cid in held else "-",
            tracker.wait_of(cid, now) if c["state"] == "waiting" else "-",
            tracker.grants_of(cid), tracker.busy_of(cid), quota_cell(c)]


def client_swapped(c: dict) -> int:
    return sum(d.get("swapped_bytes") or 0 for d in c["gpus"])


def _summary(status: dict, clients: list[dict], width: int, now: float) -> Text:
    """The first line: the scheduler, the time, how many clients are in each state."""
    sched = status.get("scheduler", {})
    counts = {s: sum(c["state"] == s for c in clients) for s in STATE_ORDER}
    others = status.get("other_users_clients")
    tail = (f"{time.strftime('%H:%M:%S', time.localtime(now))}  {len(clients)} clients: "
            f"{counts['holding']} holding, {counts['waiting']} waiting, {counts['idle']} idle"
            + (f"; {others} of other users or pods" if others else ""))
    head = f"nvshare-scheduler {sched.get('version', '?')} (pid {sched.get('pid', '?')})  "
    return Text(tail if len(head) + len(tail) > width else head + tail, overflow="fold")


def render_frame(status: dict, tracker: Tracker, width: int, height: int | None, now: float) -> Group:
    """One frame: a summary line, each GPU, and the clients; with a height, what fits in it
    (ctl_fit.py says what gives way). Every string is made inert first (inert.py): clients name
    their GPUs, jobs and pods."""
    status = inert_tree(status)
    label_gpus(status)
    clients = ordered_clients(status.get("clients", []))
    summary = _summary(status, clients, width, now)
    footprints = _gpu_footprints(status)
    gpus = status.get("gpus", [])
    # One bar width for all GPUs, so that their bars line up and compare.
    tails = [len(_memory_tail(g, footprints.get(g["uuid"], 0))) for g in gpus]
    bar_width = max(10, min(40, width - max(tails, default=0) - 8))
    blocks = [_gpu_sections(g, footprints.get(g["uuid"], 0), width, bar_width) for g in gpus]
    if not gpus:
        blocks.append([[Text("No GPUs known yet.")]])
    if status.get("gpus_not_listed"):
        blocks.append([[Text(f"+{status['gpus_not_listed']} GPUs not listed (status reply is "
                             "full)", overflow="fold")]])
    note = Text(f"{NONE}: not known yet; Grants, Wait and Busy are seen between frames",
                style="dim", overflow="fold")
    held = _held_for(status)

    def table_for(n: int):
        return _clients_table(clients[:n], held, tracker, now, width)
    if height is None:
        gpu_lines, shown = [t for b in blocks for s in b for t in s], len(clients)
    else:
        fixed = height_of(summary, width) + height_of(note, width)
        least = min(len(clients), ctl_fit.MIN_ROWS)
        table_min = (height_of(table_for(least), width) + (len(clients) > least) if clients
                     else 1)
        gpu_lines = ctl_fit.gpu_part(blocks, height - fixed - table_min)
        room = height - fixed - len(gpu_lines)
        shown = ctl_fit.rows_that_fit(table_for, len(clients), room, width) if clients else 0
    parts = [summary, *gpu_lines, table_for(shown) if clients else Text("No clients.")]
    if shown < len(clients):
        parts.append(Text(f"+{len(clients) - shown} more"))
    parts.append(note)
    return Group(*parts)


def _clients_table(shown: list[dict], held: dict, tracker: Tracker, now: float, width: int):
    rows = [_client_row(c, held, tracker, now) for c in shown]
    columns, rows = without_job(TOP_COLUMNS, rows, shown)
    # The PID column says something only where a pod names the client instead.
    if not any(c.get("pod") for c in shown):
        columns, rows = columns[:1] + columns[2:], [r[:1] + r[2:] for r in rows]
    return fitted_table("Clients", columns, rows, width)


def json_frame(status: dict, tracker: Tracker | None = None) -> dict:
    """One frame for programs: per GPU and per client what top shows; null where not reported.
    busy_share: GPU busy time over wall time since the tracker's previous sample (1.0 = one GPU
    kept busy); gpu_busy_seconds: the client's total, summed over its GPUs. jobs: as status has
    them (those of more than one member or GPU, or of a known size), and each client's job."""
    footprints = _gpu_footprints(status)
    held = _held_for(status)
    keys = ("index", "uuid", "name", "mode", "operation", "why", "tq", "tq_source", "switch_cost",
            "capacity", "memory_total", "resident_bytes", "swapped_bytes", "reclaiming",
            "last_switch")
    gpus = [{**{k: g.get(k) for k in keys}, "clients_bytes": footprints.get(g["uuid"], 0),
             "holders_bytes": g.get("used"), "holders": [h["pid"] for h in g["holders"]],
             "queue": g["queue"], "other_users_clients": g.get("other_users_clients")}
            for g in status.get("gpus", [])]
    clients = [{"client_id": c["client_id"], "pid": c["pid"], "pod": c.get("pod"),
                "label": client_label(c), "priority": c.get("priority", 0), "state": c["state"],
                "gpus": [{"index": d["index"], "uuid": d["uuid"], "state": d["state"],
                          "bytes": d["managed_bytes"] + d["other_bytes"],
                          "resident_bytes": d.get("resident_bytes"),
                          "swapped_bytes": d.get("swapped_bytes"),
                          "reclaiming": d.get("reclaiming")} for d in c["gpus"]],
                "memory_bytes": client_bytes(c), "swapped_bytes": client_swapped(c),
                "held_for": held.get(c["client_id"]),
                "lock_wait": None, "grants": None,
                "gpu_busy_seconds": sum(d.get("gpu_busy_seconds") or 0.0 for d in c["gpus"]),
                "busy_share": tracker.busy_share.get(c["client_id"]) if tracker else None,
                "quota": c.get("quota"), "job": c.get("job")}
               for c in ordered_clients(status.get("clients", []))]
    return {"time": time.time(), "scheduler": status.get("scheduler", {}), "gpus": gpus,
            "clients": clients, "jobs": status.get("jobs", []),
            "gpus_not_listed": status.get("gpus_not_listed", 0),
            "other_users_clients": status.get("other_users_clients"),
            "not_reported": ["lock_wait", "grants"]}


class StatusRefused(Exception):
    """The scheduler answered status with ok: false."""


class SchedulerGone(ConnectionError):
    """The scheduler closed the connection between frames."""


def fetch(client) -> dict:
    try:
        reply = client.request("status")
    except BrokenPipeError:  # the socket's, not stdout's: main() would take it for a closed stdout
        raise SchedulerGone(f"the scheduler at {client.path} closed the connection") from None
    if not reply.get("ok"):
        raise StatusRefused(str(reply.get("error", "failed")))
    return reply


def run(client, args) -> int:
    """nvsharectl top; the caller answers a scheduler that is gone and a closed stdout."""
    console = make_console(width=args.width)
    if args.json or args.once:
        tracker = Tracker()
        try:
            status = fetch(client)
            if any(c.get("gpus") for c in status.get("clients", [])):  # a busy share needs two samples
                tracker.sample_busy(status, time.time())
                time.sleep(args.interval)
                status = fetch(client)
        except StatusRefused as e:  # as nvsharectl status answers it
            print(f"nvsharectl: status: {e}", file=sys.stderr)
            return 1
        now = time.time()
        tracker.update(status, now)
        if args.json:
            json.dump(json_frame(status, tracker), sys.stdout, indent=2)
            print()
        else:
            console.print(render_frame(status, tracker, console.width, args.height, now))
        sys.stdout.flush()
        return 0
    try:
        return _live(client, args, console)
    except KeyboardInterrupt:  # Ctrl-C is how many leave a live view: not an error
        return 0


def _next_frame(client, tracker: Tracker, console, height: int | None):
    """The next frame; a status the scheduler refuses (today: more clients than one reply holds)
    is shown in place of it, and asked for again next time, as the clients may leave."""
    now = time.time()
    try:
        status = fetch(client)
    except StatusRefused as e:
        return Text(f"{time.strftime('%H:%M:%S', time.localtime(now))}  the scheduler refused "
                    f"status: {e}; asking again", overflow="fold")
    tracker.update(status, now)
    return render_frame(status, tracker, console.width, height, now)


def _live(client, args, console) -> int:
    from contextlib import nullcontext
    from rich.live import Live
    tracker = Tracker()
    screen = Live(console=console, screen=True, auto_refresh=False) if console.is_terminal \
        else nullcontext()
    with KeyReader(sys.stdin) as keys, screen as live:
        while True:
            # The terminal's size is read each frame, so a resized window gets a fitting frame.
            height = args.height or (console.height if console.is_terminal else None)
            frame = _next_frame(client, tracker, console, height)
            if console.is_terminal:
                live.update(frame, refresh=True)
            else:  # a pipe or a file gets the frames one after another, as `top -b` writes them
                console.print(frame)
                sys.stdout.flush()
            if keys.wait_for_quit(args.interval):
                return 0
