"""nvshare-run --gpus N|auto: how many GPUs a command wants, and which ones the scheduler's `place` op
gives it (the least loaded of the node's GPUs: scheduler/placement.py).

`auto` reads N from the command: torchrun (or `python -m torch.distributed.run`, `.launch`) with
--nproc-per-node K (--nproc_per_node, and the =K forms; the first one in the command); `gpu` or
`auto` as K there mean every GPU the scheduler knows. Otherwise LOCAL_WORLD_SIZE from the
environment, otherwise 1.

The chosen GPUs go to the command as CUDA_VISIBLE_DEVICES, by UUID: CUDA takes UUIDs there, and a
UUID names the same device whatever order NVML and CUDA enumerate in, so CUDA_DEVICE_ORDER is left as
the user has it (it would only change how bare indexes are read). The order is the ranking's, best
first, so that local rank 0 (device 0 inside the job) gets the least loaded GPU.
"""

from __future__ import annotations

import argparse
import os

from .client import SchedulerUnavailable, connect_ctl
from ..wire.protocol import ProtocolError

EVERY = "every"  # N for "every GPU the scheduler knows"
TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
NPROC = ("--nproc-per-node", "--nproc_per_node")


class Usage(Exception):
    """A --gpus request that cannot be met as given; nvshare-run prints it as a usage error."""


class Failed(Exception):
    """No placement could be had (no scheduler, or it refused); nvshare-run prints it."""


def gpus_argument(text: str):
    """`type=` for --gpus: "auto", or a positive integer (else a usage error)."""
    if text == "auto":
        return text
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"invalid value {text!r}: a positive number of GPUs, or auto")


def torch_launcher_args(cmd: list[str]) -> list[str] | None:
    """The launcher's own arguments when `cmd` starts torchrun or python -m torch.distributed.run,
    else None."""
    if not cmd:
        return None
    if os.path.basename(cmd[0]) == "torchrun":
        return cmd[1:]
    if os.path.basename(cmd[0]).startswith("python"):
        for i, arg in enumerate(cmd[1:], 1):
            if arg == "-m" and i + 1 < len(cmd):
                return cmd[i + 2:] if cmd[i + 1] in TORCH_MODULES else None
            if arg.startswith("-m") and len(arg) > 2:
                return cmd[i + 1:] if arg[2:] in TORCH_MODULES else None
            if not arg.startswith("-"):  # a script: not a module run
                return None
    return None


def _nproc(args: list[str]) -> str | None:
    """The value of the first --nproc-per-node among a launcher's arguments."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in NPROC:
            if eq:
                return value
            return args[i + 1] if i + 1 < len(args) else ""
    return None


def wanted(gpus, cmd: list[str], env: dict[str, str]) -> tuple[int | str, str]:
    """(N, or EVERY; where N came from) for --gpus; Usage when CUDA_VISIBLE_DEVICES is set (an
    explicit choice is not overridden) or auto finds a value it cannot use."""
    if "CUDA_VISIBLE_DEVICES" in env:
        raise Usage(f"--gpus chooses CUDA_VISIBLE_DEVICES, which is already set "
                    f"({env['CUDA_VISIBLE_DEVICES']!r}); unset it or leave out --gpus")
    if gpus != "auto":
        return gpus, f"--gpus {gpus}"
    launcher = torch_launcher_args(cmd)
    value = _nproc(launcher) if launcher is not None else None
    if value is not None:
        source = f"torchrun --nproc-per-node {value}"
        if value in ("gpu", "auto"):
            return EVERY, source
        if value.isascii() and value.isdigit() and int(value) >= 1:
            return int(value), source
        raise Usage(f"--gpus auto: {source} names no number of GPUs; give --gpus N")
    local = env.get("LOCAL_WORLD_SIZE")
    if local is not None:
        if local.isascii() and local.isdigit() and int(local) >= 1:
            return int(local), f"LOCAL_WORLD_SIZE={local}"
        raise Usage(f"--gpus auto: LOCAL_WORLD_SIZE={local!r} is not a positive number; "
                    "give --gpus N")
    return 1, "--gpus auto, no launcher or LOCAL_WORLD_SIZE"


def place(socket, count) -> dict:
    """The scheduler's `place` reply for `count` GPUs (EVERY: as many as it knows); Failed when
    no scheduler answers or it refuses."""
    try:
        with connect_ctl(socket) as client:
            if count == EVERY:
                status = client.request("status")
                if not status.get("ok"):
                    raise Failed(f"cannot read the scheduler's GPUs: {status.get('error')}")
                count = max(1, sum(1 for g in status["gpus"] if g.get("index") is not None))
            reply = client.request("place", count=count)
    except SchedulerUnavailable as e:
        raise Failed(f"--gpus needs a scheduler to choose GPUs: {e}") from None
    except PermissionError as e:
        raise Failed(f"--gpus: permission denied: {e.filename or socket}") from None
    except (OSError, ProtocolError) as e:
        raise Failed(f"--gpus: cannot ask the scheduler: {e}") from None
    if not reply.get("ok"):
        raise Failed(f"--gpus: the scheduler cannot place the command: {reply.get('error')}")
    return reply


def visible_devices(reply: dict) -> str:
    return ",".join(g["uuid"] for g in reply["gpus"])


def summary(reply: dict, source: str) -> str:
    """The one line nvshare-run prints about its choice."""
    labels = ",".join(str(g["index"]) if g["index"] is not None else g["uuid"]
                      for g in reply["gpus"])
    return (f"GPU{'s' if len(reply['gpus']) != 1 else ''} {labels} ({source}; least loaded: "
            f"{'; '.join(reply['why'])})")
