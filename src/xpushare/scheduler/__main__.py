"""nvshare-scheduler: the per-node GPU scheduler daemon."""

from __future__ import annotations

import argparse
import asyncio
import grp
import logging
import os
import sys
from pathlib import Path

from .. import __version__, metrics_flags
from ..envflags import parse_args
from ..usage import Parser
from ..wire.paths import SYSTEM_SOCKET, default_socket_path, socket_override
from ..wire.scheduling import check_capacity
from ..wire.sizes import parse_size
from .node import clientlog, latency, pinahead
from .shell import logformat
from .node.limits import FRAME_TIMEOUT, HELLO_TIMEOUT, MAX_CONNECTIONS_PER_UID
from .policy import Mode, check_tq

log = logging.getLogger("nvshare.scheduler")

METRICS_MAX_AGE = 1.0  # seconds a /metrics answer is shared (--metrics-max-age; exposition.py)


def _quantum(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        return check_tq(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _gpu_memory(text: str) -> tuple[str | None, int]:
    sel, _, size = text.rpartition("=")
    try:
        return (sel or None), check_capacity(parse_size(size))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _reserve(text: str) -> tuple[int | None, float | None]:
    """--reserve: (bytes, None) for a size, (None, fraction) for a percentage of the capacity."""
    wanted = f"invalid reserve {text!r}: a size (e.g. 2GiB) or a percentage of the capacity " \
             "from 0 to less than 100 (e.g. 5%)"
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            pct = -1.0
        if not 0 <= pct < 100:  # nan fails too
            raise argparse.ArgumentTypeError(wanted)
        return None, pct / 100
    try:
        return parse_size(text), None
    except ValueError:
        raise argparse.ArgumentTypeError(wanted) from None


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a count: {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return value


def _seconds_or_off(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else _seconds(text)


def _max_age(text: str) -> float:
    """--metrics-max-age: 0 (none) up to an hour."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"not a number of seconds from 0 to 3600: {text!r}")
    return value


def _log_limit(text: str) -> tuple[int, float]:
    lines, sep, seconds = text.partition("/")
    try:
        if not sep or not lines.isdigit():
            raise ValueError
        return int(lines), _seconds(seconds)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"not LINES/SECONDS (e.g. 100/30): {text!r}") from None


def _hold_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value == 0 or 0.1 <= value <= 1000):
        raise argparse.ArgumentTypeError(f"not 0 or a number of milliseconds from 0.1 to 1000: {text!r}")
    return value


def _latency_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds from 0.1 to 1000: {text!r}")
    return value


def _group(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise argparse.ArgumentTypeError(f"no such group {text!r}") from None


def _add_suspend_arguments(p: argparse.ArgumentParser) -> None:
    """Suspending whole clients (node/suspend.py)."""
    p.add_argument("--suspend-idle", type=_seconds_or_off, default=0.0, metavar="SECONDS",
                   help="suspend a client whole (the driver's process checkpoint: it keeps nothing "
                        "on the GPU, its context included) once it has been idle on all its GPUs "
                        "this long; it resumes at its next GPU call. 0: only `nvsharectl suspend` "
                        "(default: 0)")
    p.add_argument("--move-suspended", action="store_true",
                   help="when a suspended client's application wants to run and its GPU has no "
                        "room for it, move it to a GPU of the same chip type that has (as "
                        "`nvsharectl move` does; driver 580+)")
    p.add_argument("--no-suspend", action="store_true",
                   help="never suspend clients (the scheduler may lack what a checkpoint controller "
                        "needs: the clients' user or CAP_SYS_PTRACE, their PID namespace)")
    p.add_argument("--cuda-library", metavar="PATH",
                   default=os.environ.get("NVSHARE_CUDA_LIBRARY") or "libcuda.so.1",
                   help="the CUDA driver the checkpoint worker loads to suspend and resume clients "
                        "(default: $NVSHARE_CUDA_LIBRARY, else libcuda.so.1)")


def _add_log_arguments(p: argparse.ArgumentParser) -> None:
    """What the scheduler logs, and how."""
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text: one line per event (default); json: one JSON object per line, with "
                        "the line's fields (event, pid, gpu, ...)")
    p.add_argument("--log-locks", action="store_true",
                   help="log every grant and release (one line each; drops and evictions are "
                        "always logged)")
    p.add_argument("--debug", action="store_true", help="log every message (implies --log-locks)")


def _add_limit_arguments(p: argparse.ArgumentParser) -> None:
    """The bounds of what one user's clients may cost (node/limits.py, clientlog.py)."""
    p.add_argument("--max-connections-per-uid", type=_count, default=MAX_CONNECTIONS_PER_UID,
                   metavar="N",
                   help="open connections one user may have; more are refused with an error. "
                        "Root and the scheduler's own user are exempt; 0: no cap "
                        f"(default: {MAX_CONNECTIONS_PER_UID})")
    p.add_argument("--latency-queue-ms", type=_latency_ms, default=latency.QUEUE_MS, metavar="MS",
                   help="while a latency-sensitive client is attached to a GPU, the GPU time of "
                        "work each other client of that GPU may have queued (a number from 0.1 "
                        f"to 1000; default: {latency.QUEUE_MS:g})")
    p.add_argument("--latency-hold-ms", type=_hold_ms, default=latency.HOLD_MS, metavar="MS",
                   help="while a latency-sensitive client's work runs (from its first kernel after "
                        "an idle point to its next synchronisation), the other clients of its GPU "
                        "submit nothing new, for at most this long each time (0: never held; up to "
                        f"1000; default: {latency.HOLD_MS:g})")
    p.add_argument("--client-log-limit", type=_log_limit,
                   default=(clientlog.LINES, clientlog.INTERVAL), metavar="LINES/SECONDS",
                   help="log lines one user's clients may cause (requests, connections, errors) "
                        "per interval; past that they are counted, and one line at the interval's "
                        "end says how many were suppressed. Root and the scheduler's own user are "
                        "exempt; 0/S: no limit "
                        f"(default: {clientlog.LINES}/{clientlog.INTERVAL:g})")
    # How long a connection may take to send its first message, and to complete a frame (tests).
    p.add_argument("--hello-timeout", type=_seconds, default=HELLO_TIMEOUT, help=argparse.SUPPRESS)
    p.add_argument("--pin-ahead-newcomer-s", type=_seconds, default=pinahead.NEWCOMER_S,
                   help=argparse.SUPPRESS)  # the tests' short newcomer window
    p.add_argument("--frame-timeout", type=_seconds, default=FRAME_TIMEOUT, help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="nvshare-scheduler",
        description="Per-node GPU scheduler for libnvshare.so clients: one arbiter per GPU.")
    p.add_argument("--socket", metavar="PATH",
                   help="Unix socket to listen on (default: $NVSHARE_SOCK_PATH, else "
                        "/var/run/nvshare/scheduler.sock as root, else "
                        "$XDG_RUNTIME_DIR/nvshare/scheduler.sock or /tmp/nvshare-$UID/scheduler.sock)")
    p.add_argument("--tq", type=_quantum, default=None, metavar="SECONDS|auto",
                   help="time quantum of a holder when clients take turns, 0.001 to 4294967 "
                        "seconds, or auto: sized from the measured cost of this GPU's switches "
                        "so that switching takes at most about 5%% of its time (default: auto)")
    p.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.AUTO.value,
                   help="initial mode of every GPU: auto = clients whose memory fits run "
                        "together, the others take turns; serial = one holder at a time "
                        "(anti-thrash on); off = everyone runs at once (default: auto)")
    p.add_argument("--reserve", type=_reserve, default=(None, None), metavar="SIZE|PCT%",
                   help="GPU memory kept free when auto mode admits clients together: a size, or "
                        "a percentage of each GPU's capacity (default: 5%%)")
    p.add_argument("--gpu-memory", type=_gpu_memory, action="append", default=[],
                   metavar="[GPU=]SIZE",
                   help="capacity the scheduler counts a GPU as (e.g. 16GiB), for every GPU or for "
                        "one (index or UUID); repeatable; at most 4 PiB less 1 MiB. Sent to "
                        "clients in ATTACHED.")
    p.add_argument("--no-pin-ahead", action="store_true",
                   help="never tell clients to pin host copies ahead of a likely swap-out (their "
                        "first swap-out then pins while it copies)")
    p.add_argument("--no-nvml", action="store_true",
                   help="do not discover GPUs with NVML; learn them from clients")
    # Loopback unless told: the series say which processes use which GPU, and every scrape costs
    # the scheduler's loop (docs/metrics.md); in a pod the chart gives the pod's IP.
    metrics_flags.add_arguments(p, "NVSHARE_METRICS_PORT", "Prometheus metrics",
                                address_env="NVSHARE_METRICS_ADDRESS", address="127.0.0.1")
    p.add_argument("--metrics-max-age", type=_max_age, default=METRICS_MAX_AGE, metavar="SECONDS",
                   help="a /metrics answer answers the scrapes of the next SECONDS too (longer for "
                        "a state that takes long to format); 0: a fresh one each scrape "
                        f"(default {METRICS_MAX_AGE:g})")
    p.add_argument("--exit-when-idle", type=_seconds, metavar="SECONDS",
                   help="exit once no client or nvsharectl has been connected for SECONDS "
                        "(nvshare-run starts its schedulers so); default: serve until stopped")
    p.add_argument("--admin-group", type=_group, metavar="GROUP",
                   help="members of this group (name or gid) may change settings too")
    p.add_argument("--claims-socket", type=Path, metavar="PATH",
                   help="a second socket, for nvshare-dra-plugin in its own pod: whoever connects "
                        "to it may set and clear DRA claims' limits. Put it in a directory that "
                        "only the plugin's pod mounts, never the one GPU pods get (the chart does)")
    _add_limit_arguments(p)
    _add_suspend_arguments(p)
    p.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="the event loop: the standard library's (default) or uvloop's (the same "
                        "lock round trip, bursts of connects served later: docs/benchmarks.md)")
    _add_log_arguments(p)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def event_loop_factory(choice: str):
    """The loop asked for (uvloop must then be installed); logs which."""
    if choice == "uvloop":
        import uvloop

        log.info("event loop: uvloop %s", uvloop.__version__)
        return uvloop.new_event_loop
    log.info("event loop: asyncio")
    return asyncio.new_event_loop


def run(main, loop_factory) -> None:
    """asyncio.run(main) on a loop from loop_factory (asyncio.Runner takes one from Python 3.11)."""
    if hasattr(asyncio, "Runner"):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main)
        return
    loop = loop_factory()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _check_metrics(parser: argparse.ArgumentParser, args) -> None:
    """--metrics-port needs prometheus_client: without it, a usage error (exit 2) that says how to
    install it, before anything starts."""
    if not args.metrics_port:
        return
    try:
        from .exporter import httpd
    except ImportError as e:
        parser.error(f"--metrics-port needs prometheus-client ({e}): "
                     "pip install 'xpushare[kubernetes]'")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    _check_metrics(parser, args)
    logformat.configure(args.log_format, logging.DEBUG if args.debug else logging.INFO)
    if not (args.log_locks or args.debug):
        logging.getLogger("nvshare.scheduler.locks").setLevel(logging.WARNING)

    from .node.gpus import discover
    from .shell.server import Config, MetricsUnavailable, Server, SocketInUse

    config = Config(socket_path=socket_override(args.socket) or default_socket_path(),
                    tq=args.tq, mode=Mode(args.mode), reserve=args.reserve[0],
                    exit_when_idle=args.exit_when_idle,
                    admin_gid=args.admin_group, claims_socket_path=args.claims_socket,
                    max_conns_per_uid=args.max_connections_per_uid,
                    hello_timeout=args.hello_timeout, frame_timeout=args.frame_timeout,
                    metrics_port=args.metrics_port, metrics_address=args.metrics_address,
                    metrics_max_age=args.metrics_max_age,
                    nvml=not args.no_nvml, client_log_limit=args.client_log_limit,
                    suspend_idle=0.0 if args.no_suspend else args.suspend_idle,
                    cuda_library=args.cuda_library, suspend=not args.no_suspend,
                    move_suspended=args.move_suspended and not args.no_suspend,
                    latency_queue_ms=args.latency_queue_ms, latency_hold_ms=args.latency_hold_ms,
                    pin_ahead=not args.no_pin_ahead, pin_newcomer_s=args.pin_ahead_newcomer_s)
    if args.reserve[1] is not None:
        config.reserve_fraction = args.reserve[1]
    for sel, size in args.gpu_memory:
        if sel is None:
            config.gpu_memory = size
        else:
            config.gpu_memory_for[sel] = size
    gpus = [] if args.no_nvml else discover()
    try:
        loop_factory = event_loop_factory(args.event_loop)
    except ImportError as e:
        log.error("--event-loop uvloop: %s (pip install uvloop)", e)
        return 2
    try:
        from ..kubernetes.node_pods import node_pods  # the entry point hands the server the pods
        server = Server(config, gpus, *node_pods())
        run(server.run(), loop_factory)
    except PermissionError as e:
        log.error("%s", e if e.errno is None else _permission_denied(config.socket_path, e))
        return 1
    except (SocketInUse, MetricsUnavailable) as e:
        log.error("%s", e)
        return 1
    except OSError as e:
        log.error("cannot listen on %s: %s", config.socket_path, e)
        return 1
    if server.pod_watch is not None:
        _exit_leaving_threads(0)
    return 0


def _permission_denied(path, e: PermissionError) -> str:
    """What to say of an EACCES while making the socket: what was refused, and what to do."""
    what = f" ({e.filename})" if e.filename and str(e.filename) != str(path) else ""
    if os.geteuid() != 0 and str(path) == str(SYSTEM_SOCKET):
        hint = ("the system socket is root's: run the system scheduler as root (deploy/systemd), "
                "or leave out --socket and NVSHARE_SOCK_PATH for a per-user scheduler on "
                f"{default_socket_path()}")
    else:
        hint = "choose a socket in a directory you may write (--socket or NVSHARE_SOCK_PATH)"
    return f"cannot listen on {path}: permission denied{what}; {hint}"


def _exit_leaving_threads(rc: int) -> None:
    """Shutdown does not join the pod watch's threads (server.py): one still blocked in a request
    while the interpreter finalises was seen to end the process with SIGABRT instead of 0 (once, in
    a parallel test run). Their work is over: the logs are flushed and the process ends here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
