"""The metrics flags nvshare-scheduler and nvshare-device-plugin share: --metrics-port (0: off,
default from an environment variable, the one the Helm chart sets) and --metrics-address."""

from __future__ import annotations

import argparse

from .envflags import env_default


def port_number(text: str) -> int:
    """argparse type of --metrics-port: 0 (off) to 65535."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535: {n}")
    return n


def add_arguments(p: argparse.ArgumentParser, env: str, what: str, address_env: str | None = None,
                  address: str = "0.0.0.0") -> None:
    """--metrics-port (default: $env, else 0) and --metrics-address (default: $address_env when
    given and set, else `address`); `what` names the series."""
    p.add_argument("--metrics-port", type=port_number, default=env_default(p, env, "0"),
                   metavar="PORT",
                   help=f"serve {what} on this TCP port (/metrics, /healthz); 0: none (env {env}; "
                        "default 0). Needs prometheus-client: pip install 'xpushare[kubernetes]'")
    if address_env is None:
        # All addresses by default: in a pod, the metrics Service reaches the process from outside
        # its network namespace; on a host, 127.0.0.1 keeps the metrics on the machine.
        p.add_argument("--metrics-address", default=address, metavar="ADDR",
                       help="address the metrics port listens on (default %(default)s, every "
                            "address, which a Kubernetes Service needs; 127.0.0.1 keeps them on "
                            "the machine)")
        return
    p.add_argument("--metrics-address", default=env_default(p, address_env, address),
                   metavar="ADDR",
                   help=f"address the metrics port listens on (env {address_env}, which the Helm "
                        f"chart sets to the pod's IP; default {address}; 0.0.0.0: every address)")
