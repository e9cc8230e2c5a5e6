#!/usr/bin/env python3
"""How long does nvshare-scheduler take to exit after SIGTERM (issue 22, item 18: "1.3-1.9 s when
idle")? The scheduler is started as the CPU benchmarks start it (bench/core/daemon.py), with the
event loop, NVML (the tests' fake pynvml reporting two GPUs, or --no-nvml) and the metrics port
varied, and left idle, or with clients that hold and wait for a lock, a control connection whose
status replies are never read, or an idle connection to the metrics port. One second after the
last of them is set up it gets SIGTERM; the time to its exit is read from a pidfd, and its exit
status is checked. Run it with each Python to be tried (the daemon runs under this one).

    python3 bench/probes/sigterm_exit.py [--repeat 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository's root
from bench.core.daemon import Daemon  # noqa: E402
from bench.core.protoclient import ProtoClient  # noqa: E402
from xpushare.wire.protocol import MessageType, encode_json  # noqa: E402

GPUS = [{"uuid": f"GPU-0000000{i}-0000-0000-0000-000000000000", "name": "fake", "memory": 16 << 30}
        for i in range(2)]
METRICS_PORT = 19231


def _idle(d: Daemon) -> list:
    return []


def _clients(d: Daemon) -> list:
    held = []
    for i in range(8):
        c = ProtoClient(d.socket)
        c.attach(GPUS[i % 2]["uuid"], capacity=1 << 30)
        held.append(c)
    held[0].lock()
    held[2].request()  # waits behind the holder of the same GPU
    return held


def _unread_status(d: Daemon) -> list:
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(d.socket))
    for _ in range(200):
        s.sendall(encode_json(MessageType.CTL_REQUEST, {"op": "status"}))
    return [s]


def _metrics_conn(d: Daemon) -> list:
    return [socket.create_connection(("127.0.0.1", METRICS_PORT))]


CASES = {"idle": (_idle, False), "8 clients, a holder and a waiter": (_clients, False),
         "status replies unread": (_unread_status, False), "metrics port, idle": (_idle, True),
         "metrics port, a connection": (_metrics_conn, True)}


def exit_after_sigterm(loop: str, nvml: bool, case: str) -> tuple[float, int | None]:
    setup, metrics = CASES[case]
    extra = ("--event-loop", loop)
    if metrics:
        extra += ("--metrics-port", str(METRICS_PORT), "--metrics-address", "127.0.0.1")
    with Daemon("serial", extra=extra, nvml=GPUS if nvml else None) as d:
        held = setup(d)
        time.sleep(1.0)
        pidfd = os.pidfd_open(d.pid)
        try:
            started = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            select.select([pidfd], [], [], 30)
            took = time.monotonic() - started
        finally:
            os.close(pidfd)
        rc = d.proc.wait()
        for h in held:
            h.close()
    return took, rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--json", type=argparse.FileType("w"))
    a = p.parse_args(argv)
    loops = ["asyncio"]
    try:
        import uvloop  # noqa: F401
        loops.append("uvloop")
    except ImportError:
        pass
    rows = []
    for loop in loops:
        for nvml in (False, True):
            for case in CASES:
                runs = [exit_after_sigterm(loop, nvml, case) for _ in range(a.repeat)]
                rows.append({"python": sys.version.split()[0], "loop": loop,
                             "nvml": "fake, 2 GPUs" if nvml else "--no-nvml", "case": case,
                             "exit_ms": [round(t * 1e3, 1) for t, _ in runs],
                             "rc": [rc for _, rc in runs]})
                print(json.dumps(rows[-1]), flush=True)
    if a.json:
        json.dump(rows, a.json, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
