"""nvshare-device-plugin's command line: its flags, their environment variables and defaults
(plugin.py runs the plugin with what they give)."""

from __future__ import annotations

import argparse

from .. import __version__, metrics_flags
from ..envflags import env_default
from .health import DEFAULT_IGNORED_XIDS

RESOURCE_NAME = "nvshare.com/gpu"
DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_ENDPOINT = "nvshare-gpu.sock"
DEFAULT_VIRTUAL_DEVICES = 10
DEFAULT_HOST_LIB_DIR = "/var/lib/nvshare/lib"
DEFAULT_CONTAINER_LIB_DIR = "/usr/local/nvshare/lib"
DEFAULT_SOCKET_DIR = "/var/run/nvshare"


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 1000: {n}")
    return n


def gpu_list(text: str):
    """--gpu-uuids (devices.parse_gpu_list): a bad list is a usage error, naming the variable when
    it came from NVSHARE_GPU_UUIDS (envflags)."""
    from .devices import parse_gpu_list
    try:
        return parse_gpu_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_gpu_uuids_argument(p: argparse.ArgumentParser, extra: str = "") -> None:
    p.add_argument("--gpu-uuids", type=gpu_list, default=env_default(p, "NVSHARE_GPU_UUIDS"),
                   metavar="UUID[:numa=N][:minor=M][,UUID...]",
                   help="declare the GPUs instead of asking NVML, in index order "
                        f"(env NVSHARE_GPU_UUIDS){extra}")


def _xid_list(text: str):
    try:
        return frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of XIDs: {text!r}") from None


def _key_value(text: str):
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"want KEY=VALUE: {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nvshare-device-plugin",
        description="Kubelet device plugin advertising nvshare.com/gpu (N shared units per physical GPU).")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--probe", action="store_true",
                   help="check that the plugin running on this node answers on its socket "
                        "(<device-plugin-dir>/<endpoint>) and exit 0, or 1 saying why: the "
                        "DaemonSet's liveness and readiness probe")
    p.add_argument("--virtual-devices", type=_positive_int,
                   default=env_default(p, "NVSHARE_VIRTUAL_DEVICES", str(DEFAULT_VIRTUAL_DEVICES)),
                   help="units advertised per physical GPU (env NVSHARE_VIRTUAL_DEVICES; default 10)")
    add_gpu_uuids_argument(p)
    p.add_argument("--device-plugin-dir", default=env_default(p, "NVSHARE_DEVICE_PLUGIN_DIR", DEFAULT_DEVICE_PLUGIN_DIR),
                   help="the kubelet's device-plugin directory (default %(default)s)")
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="socket file name (default %(default)s)")
    p.add_argument("--resource-name", default=RESOURCE_NAME, help="default %(default)s")
    add_injection_arguments(p, "allocated container")
    p.add_argument("--pass-device-specs", action="store_true",
                   help="also list /dev/nvidia* device nodes in Allocate (for runtimes without the "
                        "NVIDIA container toolkit hook)")
    add_health_arguments(p, "is listed Unhealthy to the kubelet (its units are not allocated)")
    p.add_argument("--watch-interval", type=float, default=1.0,
                   help="seconds between socket checks (default %(default)s)")
    metrics_flags.add_arguments(p, "NVSHARE_PLUGIN_METRICS_PORT", "the plugin's Prometheus metrics")
    add_debug_argument(p)
    return p


def add_debug_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=env_default(p, "NVSHARE_DEBUG", "0") not in ("0", ""),
                   help="log at debug level (env NVSHARE_DEBUG: any value but 0)")


def add_injection_arguments(p: argparse.ArgumentParser, receiver: str) -> None:
    """What both plugins inject into a container (the library and the scheduler socket, mounted
    from the host) and where; `receiver` names whose environment --container-env extends."""
    p.add_argument("--library", default=None,
                   help="libnvshare.so to install (default: $NVSHARE_LIBRARY, else the one shipped in "
                        "the package)")
    p.add_argument("--host-lib-dir", default=env_default(p, "NVSHARE_HOST_LIB_DIR", DEFAULT_HOST_LIB_DIR),
                   help="host directory the library is installed into and mounted from; the plugin "
                        "container must see it at this same path (default %(default)s)")
    p.add_argument("--container-lib-dir", default=DEFAULT_CONTAINER_LIB_DIR,
                   help="where containers see the library directory (default %(default)s)")
    p.add_argument("--host-socket-dir", default=DEFAULT_SOCKET_DIR,
                   help="host directory of the scheduler socket (default %(default)s)")
    p.add_argument("--container-socket-dir", default=DEFAULT_SOCKET_DIR,
                   help="where containers see it (default %(default)s)")
    p.add_argument("--container-env", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help=f"extra environment for every {receiver} (repeatable)")


def add_health_arguments(p: argparse.ArgumentParser, where: str) -> None:
    """GPU health (health.py), the same for both plugins: `where` says what becomes of an unhealthy
    GPU ("is listed Unhealthy", "leaves the slice")."""
    p.add_argument("--nvml-health", choices=("auto", "on", "off"), default=env_default(p, "NVSHARE_NVML_HEALTH", "auto"),
                   help=f"watch NVML XID events and lost GPUs; an unhealthy GPU {where} "
                        "(auto: when NVML initialises)")
    p.add_argument("--ignored-xids", type=_xid_list, default=DEFAULT_IGNORED_XIDS,
                   help="XIDs that do not make a GPU unhealthy (default 13,31,43,45,68,109)")
    p.add_argument("--xid-recovery-seconds", type=float, default=300.0,
                   help="a GPU with a critical XID is Healthy again after this long without another "
                        "one and a good NVML probe (0: never; default %(default)s)")
    p.add_argument("--health-file", default=env_default(p, "NVSHARE_HEALTH_FILE"),
                   help="JSON file marking GPUs Unhealthy by hand: {\"GPU-...\": \"Unhealthy\"} "
                        "(env NVSHARE_HEALTH_FILE)")
    p.add_argument("--health-file-interval", type=float, default=0.5, help=argparse.SUPPRESS)
