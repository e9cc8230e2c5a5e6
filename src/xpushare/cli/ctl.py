"""nvsharectl: look at and steer nvshare-scheduler.

nvshare-compatible flags: -T/--set-tq N, -S/--anti-thrash on|off; plus --mode auto|serial|off,
-T auto (the dynamic quantum), --gpu SEL (one GPU), --set-gpu-memory SIZE, --set-priority N with
--pid PID or --client ID, the quotas --set-compute-limit PCT|none, --set-compute-share N and
--set-memory-limit SIZE|none with --pid PID, --client ID or --pod NAMESPACE/NAME, `status [--json]`,
`top` (a live view; --once, --json), `ping` (a cheap liveness check), `suspend`/`resume PID`,
`move PID --to GPU` and `shutdown` (admins': the scheduler exits as on SIGTERM). Exit codes: 0 ok,
1 no scheduler / permission denied / failed, 2 bad usage or a bad value (a setting the scheduler
refuses other than for permission, e.g. an unknown --gpu or --pid), 141 when stdout is a closed pipe.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import __version__
from ..usage import Parser
from .client import SchedulerUnavailable, connect_ctl
from ..wire.protocol import PRIORITY_LIMIT, ProtocolError
from ..wire.ctlschema import Invalid
from ..wire.scheduling import TQ_MAX, Mode
from ..wire.quota_ranges import (CLEAR, COMPUTE_LIMIT, COMPUTE_LIMIT_SPAN, COMPUTE_SHARE,
                                     COMPUTE_SHARE_SPAN, MEMORY_LIMIT)
from ..wire.sizes import format_size, parse_size, size_argument
from ..inert import inert
from . import ctl_move, ctl_top
from .ctl_render import render_status


def _tq_seconds(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive integer (seconds) "
                                         "or auto is required")
    if value > TQ_MAX:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: at most {TQ_MAX:.0f} seconds (the "
                                         "quantum is sent in milliseconds as a 32-bit number)")
    return value


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or abs(value) > PRIORITY_LIMIT:
        raise argparse.ArgumentTypeError(f"invalid priority {text!r}: an integer from "
                                         f"{-PRIORITY_LIMIT} to {PRIORITY_LIMIT}")
    return value


def _quota_argument(kind, what: str, read, accepted: str):
    """`type=` for a quota flag: the text as `read` understands it, kept exactly when the scheduler's
    schema for the op accepts that value (quota_ranges.py), so the flag and the op never disagree
    about a range; `accepted` says what is, in the words of the command line."""
    def argument(text: str):
        if text in kind.words:
            return text
        try:
            value = read(text)
        except ValueError:
            value = None  # no number at all: refused below, with the range in the message
        try:
            return kind.check(what, value)
        except Invalid:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: {accepted}") from None
    return argument


_compute_limit = _quota_argument(
    COMPUTE_LIMIT, "compute limit", lambda text: float(text.rstrip("%")),
    f"a percentage {COMPUTE_LIMIT_SPAN}, or {CLEAR}")
_compute_share = _quota_argument(
    COMPUTE_SHARE, "compute share", float,
    f"a number (a weight) {COMPUTE_SHARE_SPAN}")
_memory_limit = _quota_argument(
    MEMORY_LIMIT, "memory limit", parse_size,
    f"a size (e.g. 512MiB, 4GiB) of {MEMORY_LIMIT.lo} to {MEMORY_LIMIT.hi} bytes, or {CLEAR}")


def _pod(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"invalid pod {text!r}: NAMESPACE/NAME")
    return text


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive integer is required")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="nvsharectl", short_usage="nvsharectl [options] [status|top|ping|shutdown] ...",
        description="Control and inspect nvshare-scheduler.",
        epilog="examples: nvsharectl status | nvsharectl ping | nvsharectl -T 10 | "
               "nvsharectl -T auto | nvsharectl top | nvsharectl --mode serial --gpu 0 | "
               "nvsharectl --set-priority 10 --pid 4242 | nvsharectl --set-gpu-memory 16GiB --gpu 0")
    p.add_argument("-T", "--set-tq", type=_tq_seconds, metavar="N|auto",
                   help=f"set the time quantum to N seconds (1 to {TQ_MAX:.0f}), or auto: sized "
                        "from the measured cost of the GPU's switches")
    p.add_argument("-S", "--anti-thrash", choices=["on", "off"],
                   help="nvshare's switch: on = serial (one holder at a time), off = everyone runs "
                        "at once (--mode auto is the default mode)")
    p.add_argument("--mode", choices=[m.value for m in Mode],
                   help="auto = clients whose memory fits run together, the others take turns; "
                        "serial = one at a time; off = everyone at once")
    p.add_argument("--gpu", metavar="SEL",
                   help="apply -T/-S/--mode/--set-gpu-memory to one GPU (index or UUID) instead "
                        "of all")
    p.add_argument("--set-priority", type=_priority, metavar="N",
                   help="set the priority of the client given by --pid or --client (higher runs "
                        "first and preempts lower; default of a client: NVSHARE_PRIORITY or 0)")
    p.add_argument("--set-compute-limit", type=_compute_limit, metavar="PCT|none",
                   help="cap the GPU time of the clients given by --pid, --client or --pod at PCT "
                        f"percent ({COMPUTE_LIMIT_SPAN}), even on an idle GPU (none: no cap)")
    p.add_argument("--set-compute-share", type=_compute_share, metavar="N",
                   help=f"their weight when clients take turns ({COMPUTE_SHARE_SPAN}): GPU time "
                        "splits in proportion to shares (default 1)")
    p.add_argument("--set-memory-limit", type=_memory_limit, metavar="SIZE|none",
                   help="cap the memory they may hold per GPU (e.g. 4GiB; none: no cap); what they "
                        "hold is never taken away")
    p.add_argument("--set-latency-sensitive", choices=("on", "off"), metavar="on|off",
                   help="on: their GPUs' other clients keep their queued work short (--latency-queue-ms)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--pid", type=_positive_int,
                        help="the process --set-priority or a --set-compute/memory flag applies to")
    target.add_argument("--client", type=_positive_int, metavar="ID",
                        help="the client id (see status --json) they apply to")
    target.add_argument("--pod", type=_pod, metavar="NAMESPACE/NAME",
                        help="the pod whose clients, now and later, the quota flags apply to")
    p.add_argument("--set-gpu-memory", type=size_argument, metavar="SIZE",
                   help="capacity the scheduler counts --gpu as (e.g. 16GiB; 0 clears); clients "
                        "that attach afterwards get it, running ones keep what they were told")
    p.add_argument("--socket", metavar="PATH", help="scheduler socket (default: $NVSHARE_SOCK_PATH, "
                   "else the per-user socket, then /var/run/nvshare/scheduler.sock)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    st = sub.add_parser("status", help="show GPUs, lock holders, queues and clients")
    st.add_argument("--json", action="store_true", help="print the scheduler's reply as JSON")
    st.add_argument("--width", type=_positive_int, metavar="COLUMNS",
                    help="lay the tables out for this many columns (default: the terminal's, else "
                         "$COLUMNS, else 200); columns that do not fit are left out")
    ctl_top.add_parser(sub, _positive_int)
    sub.add_parser("ping", help="exit 0 if the scheduler answers, 1 otherwise (a cheap health check)")
    _add_client_commands(sub)
    sub.add_parser("shutdown", help="stop the scheduler as SIGTERM does (admins only); its clients "
                                    "run ungated until a scheduler answers again")
    return p


def _add_client_commands(sub) -> None:
    """suspend, resume and move: commands about one client, named by its pid."""
    for name, what in (("suspend", "suspend a client whole: its memory to host, then the driver's "
                                   "checkpoint (it keeps nothing on the GPU); it resumes at its next "
                                   "GPU call or with resume (admin)"),
                       ("resume", "resume a suspended client now (admin)")):
        sp = sub.add_parser(name, help=what)
        sp.add_argument("target", type=_positive_int, metavar="PID", help="the client's process id")
    ctl_move.add_parser(sub, _positive_int)


QUOTA_FLAGS = (("set_compute_limit", "set_compute_limit"), ("set_compute_share", "set_compute_share"),
               ("set_memory_limit", "set_memory_limit"))  # (args attribute, op)
# Per-client flags like the quota flags, whose values are words rather than ranges.
CLIENT_FLAGS = QUOTA_FLAGS + (("set_latency_sensitive", "set_latency_sensitive"),)
SETTINGS_OPS = ("set_tq", "set_mode", "set_gpu_memory", "set_priority",
                *(op for _, op in CLIENT_FLAGS))
PERMISSION_PREFIX = "permission denied"
EXIT_BAD_VALUE = 2
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a writer killed by SIGPIPE


def refusal_exit_code(op: str, error: str) -> int:
    """The exit code for a scheduler's `ok: false` answer. The one rule: a settings request that is
    refused for any reason but permission named a value the scheduler does not accept (no such GPU,
    client or value), so it is a bad value (2); everything else is a failure (1)."""
    if op in SETTINGS_OPS and not error.startswith(PERMISSION_PREFIX):
        return EXIT_BAD_VALUE
    return 1


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`nvsharectl status | head -1`): stop quietly, as coreutils tools do
        # when SIGPIPE ends them, and keep Python from complaining again when it flushes at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _settings_requests(parser: argparse.ArgumentParser, args) -> list[tuple[str, dict]]:
    """The settings the flags ask for, as (op, fields) in the order they are sent."""
    requests = []
    gpu = {"gpu": int(args.gpu) if args.gpu.isdigit() else args.gpu} if args.gpu else {}
    if args.set_tq is not None:
        requests.append(("set_tq", {"seconds": args.set_tq, **gpu}))
    if args.anti_thrash is not None:
        requests.append(("set_mode", {"mode": "serial" if args.anti_thrash == "on" else "off", **gpu}))
    if args.mode is not None:
        requests.append(("set_mode", {"mode": args.mode, **gpu}))
    if args.set_gpu_memory is not None:
        requests.append(("set_gpu_memory", {"bytes": args.set_gpu_memory, **gpu}))
    if args.gpu and not requests:
        parser.error("--gpu selects the GPU for -T, -S, --mode or --set-gpu-memory")
    who = ({"pid": args.pid} if args.pid is not None else {"client_id": args.client}
           if args.client is not None else {"pod": args.pod})
    if args.set_priority is not None:
        requests.append(("set_priority", {"priority": args.set_priority, **who}))
    for attr, op in CLIENT_FLAGS:
        value = getattr(args, attr)
        if value is not None:
            requests.append((op, {"value": value, **who}))
    return requests


def _changed(op: str, fields: dict, reply: dict) -> str:
    """One line saying what a settings request changed (printed once the scheduler took it)."""
    where = f"GPU {fields['gpu']}" if "gpu" in fields else "every GPU"
    if "pid" in fields:
        who = f"pid {fields['pid']}"
    elif "client_id" in fields:
        who = f"client {fields['client_id']}"
    else:
        who = f"pod {fields.get('pod')}"
    clients = f" ({reply['clients']} connection(s))" if "clients" in reply else ""
    if op == "set_tq":
        tq = fields["seconds"]
        return f"time quantum of {where}: {'dynamic' if tq == 'auto' else f'{tq} s'}"
    if op == "set_mode":
        return f"mode of {where}: {fields['mode']}"
    if op == "set_gpu_memory":
        size = fields["bytes"]
        return f"capacity of {where}: {format_size(size) if size else 'cleared (NVML decides)'}"
    what = {"set_priority": "priority", "set_compute_limit": "compute limit",
            "set_compute_share": "compute share", "set_memory_limit": "memory limit",
            "set_latency_sensitive": "latency-sensitive"}.get(op, op)
    value = fields.get("priority", fields.get("value"))
    if op == "set_compute_limit" and isinstance(value, (int, float)):
        value = f"{value:g}%"
    elif op == "set_compute_share" and isinstance(value, float):
        value = f"{value:g}"
    elif op == "set_memory_limit" and isinstance(value, int):
        value = format_size(value)
    return f"{what} of {who}: {value}{clients}"


def _print_reply(op: str, fields: dict, reply: dict, args, path) -> None:
    """What nvsharectl prints of a request the scheduler carried out."""
    if op in SETTINGS_OPS:
        print(f"nvsharectl: {_changed(op, fields, reply)}")
    elif op == "ping":
        print(f"nvshare-scheduler {reply.get('version', '?')} answers on {path}")
    elif op == "shutdown":
        print(f"nvsharectl: the scheduler on {path} is shutting down ({reply.get('clients', 0)} "
              "client(s) run ungated until a scheduler answers again)")
    elif op == "status":
        if args.json:
            json.dump(reply, sys.stdout, indent=2)
            print()
        else:
            render_status(reply, width=args.width)
    sys.stdout.flush()  # a closed pipe shows here, inside main()'s BrokenPipeError catch


def _said_suspend(op: str, reply: dict) -> int:
    """One line per client a suspend or resume named; 1 when one of them was not asked."""
    verb = "suspending" if op == "suspend" else "resuming"
    failed = 0
    for c in reply.get("clients", []):
        if c.get(verb):
            print(f"nvsharectl: pid {c['pid']}: {verb} (see nvsharectl status)")
        else:
            failed = 1
            why = inert(str(c.get("why")))
            print(f"nvsharectl: pid {c['pid']}: not {verb}: {why}", file=sys.stderr)
    return failed


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    if args.set_gpu_memory is not None and args.gpu is None:
        parser.error("--set-gpu-memory needs --gpu")
    per_client = [args.set_priority, *(getattr(args, attr) for attr, _ in CLIENT_FLAGS)]
    targeted = args.pid is not None or args.client is not None or args.pod is not None
    if all(v is None for v in per_client) == targeted:
        parser.error("--set-priority and the --set-compute-*/--set-memory-limit flags need --pid, "
                     "--client or --pod, and those need one of them")
    if args.pod is not None and args.set_priority is not None:
        parser.error("--set-priority takes --pid or --client, not --pod")
    if args.anti_thrash is not None and args.mode is not None:
        parser.error("give either -S or --mode")
    requests = _settings_requests(parser, args)
    if args.command in ("status", "ping", "shutdown"):
        requests.append((args.command, {}))
    if args.command in ("suspend", "resume"):
        requests.append((args.command, {"pid": args.target}))
    if args.command == "move":
        requests.append(ctl_move.request(args))
    if not requests and args.command != "top":
        parser.print_help()
        return 0

    try:
        with connect_ctl(args.socket) as client:
            for op, fields in requests:
                try:
                    reply = client.request(op, **fields)
                except BrokenPipeError:  # the socket's: main() takes a BrokenPipeError for stdout's
                    print(f"nvsharectl: {op}: the scheduler closed the connection", file=sys.stderr)
                    return 1
                if not reply.get("ok"):
                    error = str(reply.get("error", "failed"))
                    print(f"nvsharectl: {op}: {error}", file=sys.stderr)
                    return refusal_exit_code(op, error)
                if op in ("suspend", "resume"):
                    return _said_suspend(op, reply)
                if op == "move":
                    return ctl_move.said(client, args, reply)
                _print_reply(op, fields, reply, args, client.path)
            if args.command == "top":
                return ctl_top.run(client, args)
    except SchedulerUnavailable as e:
        print(f"nvsharectl: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # an OSError, but main() answers it
        raise
    except PermissionError as e:
        print(f"nvsharectl: permission denied: {e.filename or args.socket}", file=sys.stderr)
        return 1
    except (OSError, ProtocolError) as e:
        print(f"nvsharectl: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
