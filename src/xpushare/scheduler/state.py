"""What the running scheduler knows, in one place: its settings, the GPU registry, the open
connections and the pod lookup. Connection handlers, control operations and the status view all
work on a SchedulerState; server.py only creates it and serves."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .gpus import GpuInfo
from .peer import PodLookup
from .policy import Mode
from .registry import GpuRegistry

if TYPE_CHECKING:
    from .connection import Conn


@dataclass
class Config:
    socket_path: Path
    tq: float | None = None                               # None = the dynamic quantum
    mode: Mode = Mode.AUTO
    reserve: int | None = None                            # --reserve; None = the policy's default
    gpu_memory: int = 0                                   # --gpu-memory SIZE: every GPU
    gpu_memory_for: dict[str, int] = field(default_factory=dict)  # --gpu-memory SEL=SIZE
    admin_gid: int | None = None                          # --admin-group


class SchedulerState:
    def __init__(self, config: Config, gpus: list[GpuInfo] = ()):
        self.config = config
        self.registry = GpuRegistry(config)
        self.conns: set[Conn] = set()
        self.pods = PodLookup()
        self._ids = itertools.count(1)
        for info in gpus:
            self.registry.add(info.uuid, info.index, info.name, info.memory_total)

    def next_id(self) -> int:
        return next(self._ids)

    def clients(self) -> list[Conn]:
        """Connections of client processes (after HELLO), oldest first."""
        return sorted((c for c in self.conns if c.hello is not None), key=lambda c: c.id)
