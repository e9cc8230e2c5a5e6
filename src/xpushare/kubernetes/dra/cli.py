"""nvshare-dra-plugin's command line: its flags, their environment variables and defaults (main.py
runs the plugin with what they give)."""

from __future__ import annotations

import argparse

from ... import __version__
from ...envflags import env_default
from ...wire.sizes import parse_size
from ..plugin_cli import (_positive_int, add_debug_argument, add_gpu_uuids_argument, add_health_arguments,
                          add_injection_arguments)
from . import DRIVER_NAME
from .inventory import AUTO, CONSUMABLE, SLOTS

DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_DIR = "/var/run/cdi"
DEFAULT_STATE_DIR = "/var/lib/nvshare/dra"


def _gpu_memory(text: str):
    """SIZE (every GPU) or UUID=SIZE."""
    sel, eq, size = text.rpartition("=")
    try:
        n = parse_size(size)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return (sel if eq else "*"), n


def _number(lo: float, hi: float):
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}: {text}")
        return x
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nvshare-dra-plugin",
        description=f"Kubernetes DRA kubelet plugin for the driver {DRIVER_NAME}: publishes this node's "
                    "GPUs (memory and compute, shared by several claims) and prepares claims with "
                    "their limits enforced by libnvshare.so and nvshare-scheduler.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--dry-run", action="store_true",
                   help="discover the GPUs (NVML, or --gpu-uuids), print the ResourceSlice that would "
                        "be published (JSON) and exit; needs no cluster")
    p.add_argument("--probe", action="store_true",
                   help="check that the plugin running on this node answers on its DRA socket and exit "
                        "0, or 1 saying why: the DaemonSet's liveness and readiness probe")
    p.add_argument("--node-name", default=env_default(p, "NODE_NAME"),
                   help="this node's name (env NODE_NAME, from the downward API; --dry-run: the host name)")
    p.add_argument("--driver-name", default=DRIVER_NAME, help="default %(default)s")
    p.add_argument("--sharing", choices=(AUTO, CONSUMABLE, SLOTS), default=env_default(p, "NVSHARE_DRA_SHARING", AUTO),
                   help="consumable: one device per GPU whose memory and compute claims share "
                        "(Kubernetes 1.34+ with DRAConsumableCapacity; 1.35+ on nodes of several GPUs); "
                        "slots: --slots devices per GPU, for clusters without it; auto: consumable, "
                        "but slots (with a warning) where the API server is older than 1.35 and the "
                        "node has several GPUs (env NVSHARE_DRA_SHARING; default %(default)s)")
    p.add_argument("--slots", type=_positive_int, metavar="N", default=4,
                   help="devices per GPU with --sharing=slots (1 to 1000; default %(default)s)")
    add_gpu_uuids_argument(p, "; each needs its memory from --gpu-memory")
    p.add_argument("--gpu-memory", type=_gpu_memory, action="append", default=[], metavar="[UUID=]SIZE",
                   help="count a GPU's memory as SIZE instead of the card's (e.g. 40GiB; repeatable)")
    p.add_argument("--oversubscribe", type=_number(0.1, 100), default=1.0, metavar="FACTOR",
                   help="publish FACTOR x the memory: claims on one GPU may add up to more than it "
                        "holds, swapped in turns by the scheduler (default %(default)s)")
    _add_paths(p)
    add_health_arguments(p, "leaves the slice")
    p.add_argument("--watch-interval", type=float, default=1.0,
                   help="seconds between socket checks and slice retries (default %(default)s)")
    p.add_argument("--resync-interval", type=float, default=30.0,
                   help="seconds between re-sending prepared claims' limits to the scheduler "
                        "(default %(default)s)")
    add_debug_argument(p)
    return p


def _add_paths(p: argparse.ArgumentParser) -> None:
    """Where the kubelet, the runtime, the library and the scheduler are on the node."""
    p.add_argument("--kubelet-plugins-dir", default=DEFAULT_PLUGINS_DIR,
                   help="the DRA socket goes in <this>/<driver>/dra.sock (default %(default)s)")
    p.add_argument("--kubelet-registry-dir", default=DEFAULT_REGISTRY_DIR,
                   help="the kubelet's plugin registration directory (default %(default)s)")
    p.add_argument("--cdi-dir", default=DEFAULT_CDI_DIR, help="CDI spec directory (default %(default)s)")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                   help="where prepared claims are recorded (default %(default)s)")
    p.add_argument("--scheduler-socket", default=None,
                   help="the scheduler socket the plugin tells claims' limits to (default: "
                        "<host-socket-dir>/scheduler.sock, which takes them from a process outside "
                        "any pod; in a pod of its own the plugin needs the scheduler's --claims-socket, "
                        "as the chart sets it)")
    add_injection_arguments(p, "prepared claim's container")
    p.add_argument("--kubeconfig", default=env_default(p, "NVSHARE_KUBECONFIG"),
                   help="kubeconfig file (default: the in-cluster service account)")
