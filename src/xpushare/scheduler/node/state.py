"""What the running scheduler knows, in one place: its settings, the GPU registry, the open
connections (and how many each uid has), the pod lookup and the admission of new connections. Connection handlers, control operations and the status view all
work on a SchedulerState; server.py only creates it and serves."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import clientlog, latency, limits, pinahead
from .access import RequestBudget
from .slicer import Slicer
from .suspend import Suspender
from .gpus import GpuInfo
from .metrics import SchedulerStats
from .peer import NoPods
from ..policy import RESERVE_FRACTION, Mode
from .quotas import Quotas
from .registry import GpuRegistry

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu


@dataclass
class Config:
    socket_path: Path
    claims_socket_path: Path | None = None                # --claims-socket (access.py)
    tq: float | None = None                               # None = the dynamic quantum
    mode: Mode = Mode.AUTO
    reserve: int | None = None                            # --reserve SIZE; None: the fraction
    reserve_fraction: float = RESERVE_FRACTION            # --reserve PCT% (of each capacity)
    exit_when_idle: float | None = None                   # --exit-when-idle; None: serve on
    gpu_memory: int = 0                                   # --gpu-memory SIZE: every GPU
    gpu_memory_for: dict[str, int] = field(default_factory=dict)  # --gpu-memory SEL=SIZE
    admin_gid: int | None = None                          # --admin-group
    max_conns_per_uid: int = limits.MAX_CONNECTIONS_PER_UID  # --max-connections-per-uid; 0 = none
    hello_timeout: float = limits.HELLO_TIMEOUT           # hidden --hello-timeout
    frame_timeout: float = limits.FRAME_TIMEOUT           # hidden --frame-timeout
    metrics_port: int = 0                                 # --metrics-port; 0 = no exporter
    metrics_address: str = "127.0.0.1"                    # --metrics-address
    metrics_max_age: float = 0.0                          # --metrics-max-age (the CLI's: 1)
    nvml: bool = True                                     # not --no-nvml: NVML series too
    client_log_limit: tuple[int, float] = (clientlog.LINES, clientlog.INTERVAL)  # --client-log-limit
    suspend_idle: float = 0.0                             # --suspend-idle SECONDS; 0 = never by itself
    cuda_library: str = "libcuda.so.1"                    # --cuda-library: the checkpoint worker's driver
    suspend: bool = True                                  # not --no-suspend
    move_suspended: bool = False                          # --move-suspended (move.py)
    latency_queue_ms: float = latency.QUEUE_MS            # --latency-queue-ms
    latency_hold_ms: float = latency.HOLD_MS              # --latency-hold-ms; 0 = no holds
    pin_ahead: bool = True                                # not --no-pin-ahead (pinahead.py)
    pin_newcomer_s: float = pinahead.NEWCOMER_S           # hidden --pin-ahead-newcomer-s


class SchedulerState:
    def __init__(self, config: Config, gpus: list[GpuInfo] = (), pods=None):
        self.config = config
        self.registry = GpuRegistry(config)
        self.conns: set[Conn] = set()
        self.latency: dict[Gpu, set[Conn]] = {}           # its latency-sensitive clients (latency.py)
        self.bursting: dict[Gpu, set[Conn]] = {}          # those of them in a burst now (latency.py)
        self.held: dict[Gpu, tuple[float, set[Conn]]] = {}  # when their burst's hold began, whom (latency.py)
        self.pin_clients: dict[Gpu, dict[Conn, bool]] = {}  # attached clients: still new? (pinahead.py)
        self.pin_on: set[Gpu] = set()                     # a swap-out is likely soon (pinahead.py)
        self.uid_conns: Counter[int] = Counter()          # uid -> open connections
        self.fd_limit = 0                                 # the open-file limit, set when serving
        self.conn_room = 1 << 62                          # connections before the fd reserve
        self.warnings = limits.LogLimiter()               # refusals, keyed by uid; accept errors
        self.client_log = clientlog.ClientLog(*config.client_log_limit)  # lines clients cause
        self.registry.client_log = self.client_log
        self.pods = pods or NoPods()                      # pid -> pod (the entry point's)
        self.stats = SchedulerStats()                     # event counts for the exporter
        self.quotas = Quotas(self)                        # limits and shares (quotas.py)
        self.requests = RequestBudget()                   # control requests per non-admin uid
        self.slicer = Slicer()                            # status, /metrics: a slice at a time
        self.suspender = Suspender(config.cuda_library, config.suspend)  # the checkpoint worker
        self._ids = itertools.count(1)
        self.request_stop = None  # the server's: ends serving (nvsharectl shutdown), once it runs
        for info in gpus:
            self.registry.add(info.uuid, info.index, info.name, info.memory_total)

    def next_id(self) -> int:
        return next(self._ids)

    def admission(self, uid: int, privileged: bool) -> str | None:
        """Why a new connection of `uid` is refused (its ERROR text), or None to admit it;
        privileged: access.node_privileged's answer for it (exempt from the caps)."""
        if privileged:
            return None
        if len(self.conns) >= self.conn_room:
            return (f"the scheduler is at its open-file limit ({len(self.conns)} connections, "
                    f"limit {self.fd_limit}); only root is served now")
        cap = self.config.max_conns_per_uid
        if cap and self.uid_conns[uid] >= cap:
            return (f"too many connections from uid {uid}: {self.uid_conns[uid]} open, at most "
                    f"{cap} (--max-connections-per-uid)")
        return None

    def connected(self, conn: Conn) -> None:
        self.conns.add(conn)
        self.uid_conns[conn.uid] += 1
        self.stats.connections += 1

    def disconnected(self, conn: Conn) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            self.quotas.forget(conn)
            latency.disconnected(self, conn)
            pinahead.disconnected(self, conn)
            self.uid_conns[conn.uid] -= 1
            if not self.uid_conns[conn.uid]:
                del self.uid_conns[conn.uid]

    def clients(self) -> list[Conn]:
        """Connections of client processes (after HELLO), oldest first."""
        return sorted((c for c in self.conns if c.hello is not None), key=lambda c: c.id)
