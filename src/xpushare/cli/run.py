"""nvshare-run: run a command under libnvshare.so.

Sets LD_PRELOAD (ours first, no duplicate), NVSHARE_* from the flags and the allocator recipes that
keep frameworks off VMM allocations of their own (counted but never swapped out), starts a per-user scheduler when
none answers (unless --no-start; it exits by itself once idle: IDLE_EXIT_SECONDS), with --gpus
sets CUDA_VISIBLE_DEVICES to the GPUs the scheduler places the command on (run_gpus.py), then
execs the command. A scheduler that cannot be started is a
warning, never a reason not to run the command: the library then runs it ungated. The exception is
--gpus, which asks for the scheduler's choice: without one the command is not run (exit 1). A socket
that is not trusted (paths.socket_trusted: planted by another user) is neither probed nor started on.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from .. import __version__
from . import run_gpus
from ..wire.paths import (
    LIBRARY_NAME, TRUST_FIX, can_create_dir, client_socket_candidates, default_socket_path,
    ensure_socket_dir, library_path, socket_override, socket_trusted,
)
from .client import socket_answers
from ..usage import Parser
from ..wire.sizes import size_argument

START_TIMEOUT = 5.0
# A scheduler nvshare-run starts exits once no connection has been open for this long
# (nvshare-scheduler --exit-when-idle): the programs it was started for are gone, and the next
# nvshare-run starts another. Long enough for a program's CPU work before its first CUDA call.
IDLE_EXIT_SECONDS = 300
# PyTorch's allocator settings: PYTORCH_ALLOC_CONF (the newer name, read first where PyTorch knows
# it) and PYTORCH_CUDA_ALLOC_CONF (the older one, read by every version).
TORCH_ALLOC_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
TORCH_ALLOC = "PYTORCH_CUDA_ALLOC_CONF"  # where the recipe goes when the user set neither
USAGE = "nvshare-run [options] -- CMD [ARGS...]"


def _gpu_memory(text: str) -> int:
    size = size_argument(text)
    if size <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: more than 0 bytes (leave "
                                         "--gpu-memory out to count each GPU as its own size)")
    return size


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="nvshare-run", short_usage=USAGE,
        usage="%(prog)s [options] -- CMD [ARGS...]\n       %(prog)s --print-lib",
        description="Run CMD with libnvshare.so preloaded so that it shares the GPU(s) through "
                    "nvshare-scheduler.")
    p.add_argument("--gpu-memory", type=_gpu_memory, metavar="SIZE",
                   help="count every GPU as SIZE (e.g. 16GiB): sets NVSHARE_GPU_MEMORY")
    p.add_argument("--single-oversub", action="store_true",
                   help="let this process alone allocate past the GPU's capacity "
                        "(NVSHARE_ENABLE_SINGLE_OVERSUB=1)")
    p.add_argument("--debug", action="store_true", help="log the library's decisions (NVSHARE_DEBUG=1)")
    p.add_argument("--no-start", action="store_true",
                   help="do not start a per-user scheduler when none answers")
    p.add_argument("--socket", metavar="PATH", help="scheduler socket (sets NVSHARE_SOCK_PATH)")
    p.add_argument("--gpus", type=run_gpus.gpus_argument, metavar="N|auto",
                   help="run on the N least-loaded GPUs the scheduler chooses: sets "
                        "CUDA_VISIBLE_DEVICES to their UUIDs (refused when it is already set). "
                        "auto: N is torchrun's --nproc-per-node when CMD is torchrun or python -m "
                        "torch.distributed.run (gpu or auto there: every GPU), else "
                        "$LOCAL_WORLD_SIZE, else 1")
    p.add_argument("--print-lib", action="store_true", help="print the path of libnvshare.so and exit")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                   help="print the version and exit (before --; after it, --version is CMD's)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _warn(msg: str) -> None:
    print(f"nvshare-run: {msg}", file=sys.stderr)


def preload_value(lib: str, existing: str | None) -> str:
    """`lib` first, then the existing entries (separated by ':' or spaces) without another copy of it."""
    entries = (existing or "").replace(":", " ").split()
    rest = [e for e in entries if e != lib and os.path.basename(e) != LIBRARY_NAME]
    return ":".join([lib] + rest)


def child_env(args, lib: str, base: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The command's environment and the warnings to print."""
    env = dict(base)
    warnings = []
    env["LD_PRELOAD"] = preload_value(lib, env.get("LD_PRELOAD"))
    if args.gpu_memory is not None:
        env["NVSHARE_GPU_MEMORY"] = str(args.gpu_memory)
    if args.single_oversub:
        env["NVSHARE_ENABLE_SINGLE_OVERSUB"] = "1"
    if args.debug:
        env["NVSHARE_DEBUG"] = "1"
    if args.socket:
        env["NVSHARE_SOCK_PATH"] = str(args.socket)
    # A value the user set, under either name, is kept as it is (the recipe is PyTorch's default;
    # setting it beside a user's value would override that value where PyTorch reads ours first).
    users = [(name, env[name]) for name in TORCH_ALLOC_NAMES if name in env]
    if not users:
        env[TORCH_ALLOC] = "expandable_segments:False"
    for name, conf in users:
        compact = conf.replace(" ", "")
        # cudaMallocAsync needs no warning: its pool allocations (cuMemAllocAsync) are converted.
        if "expandable_segments:True" in compact:
            warnings.append(f"{name}={conf} makes PyTorch map its own memory (VMM); the library counts "
                            "that memory but does not swap it out, so it stays on the GPU while the "
                            "program waits for its turn")
    env.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env, warnings


def ensure_scheduler(explicit: str | None, no_start: bool) -> None:
    """Start a per-user scheduler in the background if none answers; warn if that fails.

    Sockets that are not trusted are skipped; when no trusted one answers and the socket to start on
    is not trusted either, one warning says why and the command runs without a scheduler (its
    library refuses that socket too, and says so once).
    """
    candidates = client_socket_candidates(explicit)
    distrust = {p: why for p in candidates if (why := socket_trusted(p))}
    if any(socket_answers(p) for p in candidates if p not in distrust):
        return
    target = socket_override(explicit) or default_socket_path()
    if no_start:
        return
    if why := distrust.get(target) or socket_trusted(target):
        _warn(f"warning: not using the scheduler socket {target}: {why}; running the command without "
              f"a scheduler (GPU work is not scheduled). To be scheduled, {TRUST_FIX}")
        return
    if not can_create_dir(target.parent):
        _warn(f"no scheduler answers at {', '.join(map(str, candidates))} and {target.parent} is not "
              "writable; running without one")
        return
    try:
        ensure_socket_dir(target)
    except OSError as e:
        _warn(f"cannot prepare {target.parent}: {e}; running without a scheduler")
        return
    logfile = target.parent / "scheduler.log"
    env = dict(os.environ)
    if "LD_PRELOAD" in env:  # the scheduler itself must not run under the library
        env["LD_PRELOAD"] = ":".join(e for e in env["LD_PRELOAD"].replace(":", " ").split()
                                     if os.path.basename(e) != LIBRARY_NAME)
    try:
        with open(logfile, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "xpushare.scheduler", "--socket",
                                     str(target), "--exit-when-idle", str(IDLE_EXIT_SECONDS)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env, start_new_session=True, close_fds=True)
    except OSError as e:  # e.g. a scheduler.log that is not ours: the command still runs
        _warn(f"warning: cannot start a scheduler on {target}: {e}; running the command without "
              "one (GPU work is not scheduled)")
        return
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if socket_answers(target):
            _warn(f"started a scheduler (pid {proc.pid}) on {target}; log: {logfile}; it exits "
                  f"{IDLE_EXIT_SECONDS} s after its last client (or: nvsharectl shutdown)")
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    _warn(f"warning: the scheduler did not start on {target} (see {logfile}); running the command "
          "without one (GPU work is not scheduled)")


def command_problem(name: str, path: str) -> tuple[str, int] | None:
    """Why `name` cannot be run, with the shell's exit code for it (127: not found, 126: found but
    not executable), or None when it can."""
    if shutil.which(name, path=path) is not None:
        return None
    candidates = [name] if "/" in name else [os.path.join(d or ".", name) for d in path.split(":")]
    for c in candidates:
        if os.path.isdir(c) and "/" in name:
            return "is a directory", 126
        if os.path.isfile(c):
            return "permission denied (not executable)", 126
    return "command not found", 127


def _driver_missing(env: dict) -> str | None:
    """Why the NVIDIA driver library cannot be loaded (the one the library will use), or None."""
    import ctypes

    name = env.get("NVSHARE_CUDA_LIBRARY") or "libcuda.so.1"
    try:
        ctypes.CDLL(name)
    except OSError as e:
        return f"{name} cannot be loaded: {e}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.print_lib and cmd:
        parser.error("--print-lib prints the library's path and runs nothing: give it no command")
    if not cmd and not args.print_lib:
        parser.error("no command given")
    if args.gpus is not None and not args.print_lib:
        try:
            count, source = run_gpus.wanted(args.gpus, cmd, dict(os.environ))
        except run_gpus.Usage as e:
            parser.error(str(e))
    try:
        lib = str(library_path())
    except FileNotFoundError as e:
        _warn(f"libnvshare.so not found: {e}")
        return 1
    if args.print_lib:
        print(lib)
        return 0

    env, warnings = child_env(args, lib, dict(os.environ))
    if (missing := command_problem(cmd[0], env.get("PATH", os.defpath))) is not None:
        why, code = missing
        _warn(f"{cmd[0]}: {why}")
        return code
    ensure_scheduler(args.socket, args.no_start)
    if args.gpus is not None:
        try:
            reply = run_gpus.place(args.socket, count)
        except run_gpus.Failed as e:
            _warn(f"error: {e}")
            return 1
        env["CUDA_VISIBLE_DEVICES"] = run_gpus.visible_devices(reply)
        _warn(run_gpus.summary(reply, source))
    if (missing := _driver_missing(env)) is not None:
        warnings.append(f"no NVIDIA driver found ({missing}): the command runs, but nothing is shared")
    for w in warnings:
        _warn(f"warning: {w}")
    try:
        os.execvpe(cmd[0], cmd, env)
    except FileNotFoundError:
        _warn(f"{cmd[0]}: command not found")
        return 127
    except PermissionError:
        _warn(f"{cmd[0]}: permission denied")
        return 126
    except OSError as e:
        _warn(f"{cmd[0]}: {e.strerror}")
        return 126


if __name__ == "__main__":
    sys.exit(main())
