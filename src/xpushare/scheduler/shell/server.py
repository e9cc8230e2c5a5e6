"""nvshare-scheduler's lifecycle: start up, serve, stop on a signal, shut down. Nothing else.

What it serves lives elsewhere: node/state.py (what the scheduler knows), shell/connection.py (one
connection and its message handlers), control/ (nvsharectl's operations and the status view),
node/registry.py (GPUs, their timers and the bridge to the policy), policy/ (the pure scheduling
policy). docs/architecture.md shows how they fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import stat
import time
from pathlib import Path

from ... import __version__
from ...wire.paths import ensure_socket_dir
from ...cli.client import socket_answers
from ..node import limits, suspend
from .connection import Connection
from ..node.gpus import GpuInfo
from ..node.state import Config, SchedulerState

__all__ = ["Config", "MetricsUnavailable", "Server", "SocketInUse"]

log = logging.getLogger("nvshare.scheduler")


class SocketInUse(RuntimeError):
    pass


class MetricsUnavailable(RuntimeError):
    """The exporter's port cannot be listened on."""


class Server:
    def __init__(self, config: Config, gpus: list[GpuInfo] = (), pods=None, watch_pods=None):
        """pods: pid -> pod (peer.NoPods' interface); watch_pods(on_changed, on_removed, loop): starts
        a watch of the pods' settings and returns it (with stop()), or None. Both come from the
        entry point (__main__.py), which knows the node; without them there are no pods."""
        self.config = config
        self.state = SchedulerState(config, gpus, pods)
        self._watch_pods = watch_pods
        self._server: asyncio.AbstractServer | None = None
        self._socket_ino: int | None = None
        self._claims_server: asyncio.AbstractServer | None = None  # --claims-socket
        self._claims_ino: int | None = None
        self.metrics = None  # httpd.MetricsServer when --metrics-port is given
        self.pod_watch = None  # what watch_pods started (it has stop()), when it did
        self._idle_suspender: asyncio.Task | None = None  # --suspend-idle's timer

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, `nvsharectl shutdown` or, with --exit-when-idle, a time
        without connections; remove the socket on the way out."""
        stop = asyncio.Event()
        await self.startup()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.state.request_stop = stop.set
        idle = (loop.create_task(self._exit_when_idle(stop, self.config.exit_when_idle))
                if self.config.exit_when_idle else None)
        try:
            await stop.wait()
        finally:
            self.state.request_stop = None
            if idle is not None:
                idle.cancel()
            await self.shutdown()

    async def _exit_when_idle(self, stop: asyncio.Event, seconds: float) -> None:
        """Set `stop` once no connection has been open for `seconds` (from the start, or the end
        of the last one). A connection made and gone between two looks counts too (the count of
        connections changed), so a probe such as nvshare-run's restarts the wait."""
        loop = asyncio.get_running_loop()
        stats, seen, idle_since = self.state.stats, self.state.stats.connections, loop.time()
        while True:
            await asyncio.sleep(min(1.0, seconds / 4))
            now = loop.time()
            if self.state.conns or stats.connections != seen:
                seen, idle_since = stats.connections, now
            elif now - idle_since >= seconds:
                log.info("no connection for %gs: exiting (--exit-when-idle)", seconds)
                stop.set()
                return

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self.state.registry.start(loop)
        fd_limit = limits.raise_fd_limit()
        limits.quiet_accept_errors(loop, self.state.warnings, fd_limit)
        path = Path(self.config.socket_path)
        for created in ensure_socket_dir(path):
            log.info("created the socket directory %s (mode %04o)", created,
                     stat.S_IMODE(created.stat().st_mode))
        _remove_stale_socket(path)
        # Before the socket: once it answers (a readiness probe), the metrics port answers too.
        await self._start_metrics()
        self._server = await loop.create_unix_server(lambda: Connection(self.state),
                                                     path=str(path))
        os.chmod(path, 0o666)  # anyone may be scheduled; settings are checked per request
        self._socket_ino = path.stat().st_ino
        await self._start_claims_socket(loop)
        # What is open now (stdio, the loop, the socket, NVML) stays open; connections get the rest
        # but the reserve (limits.py).
        self.state.fd_limit = fd_limit
        room = fd_limit - limits.open_fds() - limits.FD_RESERVE
        self.state.conn_room = max(0, room // limits.FDS_PER_CONNECTION)
        self._start_pod_watch(loop)
        if self.config.suspend_idle > 0:
            self._idle_suspender = loop.create_task(self._suspend_idle(self.config.suspend_idle))
        # What exists now (modules, classes, functions: most of the daemon's objects) lives as long
        # as the daemon: out of the collector's way, a full collection scans only what was made
        # while serving (docs/benchmarks.md, "fuzzing": full collections were what held the loop).
        gc.freeze()
        registry = self.state.registry
        log.info("nvshare-scheduler %s listening on %s (mode %s, tq %s, %d gpu(s) known)",
                 __version__, path, registry.default_mode.value,
                 "dynamic" if registry.default_tq is None else f"{registry.default_tq:g}s",
                 len(registry.gpus))

    async def _start_claims_socket(self, loop: asyncio.AbstractEventLoop) -> None:
        """--claims-socket: nvshare-dra-plugin's way in (access.py). Owner-only: the directory it
        is in, mounted into the plugin's pod alone, is what keeps GPU pods out."""
        if self.config.claims_socket_path is None:
            return
        path = Path(self.config.claims_socket_path)
        ensure_socket_dir(path)
        _remove_stale_socket(path)
        self._claims_server = await loop.create_unix_server(
            lambda: Connection(self.state, claims_socket=True), path=str(path))
        os.chmod(path, 0o600)
        self._claims_ino = path.stat().st_ino
        log.info("DRA claims' limits accepted on %s", path)

    async def _start_metrics(self) -> None:
        config = self.config
        if not config.metrics_port:
            return
        from ..exporter.httpd import MetricsServer  # needs prometheus_client, which __main__ has checked
        self.metrics = MetricsServer(self.state, config.metrics_address, config.metrics_port,
                                     nvml=config.nvml, max_age=config.metrics_max_age)
        try:
            await self.metrics.start()
        except OSError as e:
            self.metrics = None
            raise MetricsUnavailable(f"cannot serve metrics on {config.metrics_address}:"
                                     f"{config.metrics_port}: {e.strerror or e}") from None

    def _start_pod_watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The pods' settings (quotas.py), reported on the loop, when the entry point gave a watch."""
        if self._watch_pods is not None:
            quotas = self.state.quotas
            self.pod_watch = self._watch_pods(quotas.pod_changed, quotas.pod_removed, loop)

    async def _suspend_idle(self, after: float) -> None:
        """Every client idle on all its GPUs for `after` seconds is asked to suspend (suspend.py)."""
        while True:
            await asyncio.sleep(min(1.0, after / 4))
            suspend.idle_round(self.state, after, time.monotonic())

    async def shutdown(self) -> None:
        """Prompt: nothing here waits on a peer or a thread. The pod watch's threads are told to
        stop but not joined (daemons, ended with the process: a watch blocked in a request held
        the exit up to 2 s per thread); the connections are closed, those with output their peer
        has not read aborted (Conn.close), and nothing waits for them to be gone (from Python
        3.12 Server.wait_closed waits for every connection: up to its 2 s timeout)."""
        log.info("shutting down")
        if self.pod_watch is not None:
            self.pod_watch.stop(timeout=0)
        if self.metrics is not None:
            await self.metrics.stop()
        if self._idle_suspender is not None:
            self._idle_suspender.cancel()
        await suspend.resume_all(self.state)  # no client is left checkpointed
        await self.state.suspender.close()
        if self._server is None:
            return
        self._server.close()  # closes the listening socket now
        if self._claims_server is not None:
            self._claims_server.close()
        for conn in list(self.state.conns):
            conn.close()
        for path, ino in ((self.config.socket_path, self._socket_ino),
                          (self.config.claims_socket_path, self._claims_ino)):
            with contextlib.suppress(OSError, TypeError):
                if Path(path).stat().st_ino == ino:  # never remove a successor's socket
                    Path(path).unlink()


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket nobody answers on; refuse a live one or a file that is not a socket."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; not removing it")
    if socket_answers(path):
        raise SocketInUse(f"another scheduler is already listening on {path}")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    log.info("removed stale socket %s", path)
