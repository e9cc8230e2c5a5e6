"""nvshare-dra-plugin: the process.

  1. Find the GPUs (NVML), install libnvshare.so into --host-lib-dir (as nvshare-device-plugin does).
     --dry-run stops here: it prints the ResourceSlice it would publish and exits.
  2. Serve DRAPlugin (v1, v1beta1) on <kubelet-plugins-dir>/<driver>/dra.sock, then Registration on
     <kubelet-registry-dir>/<driver>-reg.sock: the kubelet's plugin watcher finds it and registers us.
  3. Each tick (--watch-interval): serve again any socket that was removed; publish the node's
     ResourceSlice when the inventory or health changed, or the last try failed; every
     --resync-interval, tell the scheduler the prepared claims' limits again.
  4. SIGTERM/SIGINT: stop serving, remove our sockets, exit 0. The slice stays: the kubelet removes a
     driver's slices when it stays unregistered, and a restarting plugin keeps its devices published.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

from ...envflags import parse_args
from ..health import FileHealthSource, HealthBoard, HealthSource, NvmlHealthMonitor
from ..libinstall import clean_stale_temps, default_library_source, install_library
from .cdi import SCHEDULER_SOCKET_NAME, Injection
from .cli import build_parser
from .inventory import (AUTO, CONSUMABLE, GpuInfo, Publishing, declared, device_specs, discover, resource_slice,
                        sharing_for, slice_devices)

log = logging.getLogger("nvshare-dra-plugin")
EXTRA_HINT = "python3 -m pip install 'xpushare[kubernetes]'"


class Served:
    """One gRPC server on one Unix socket, started again when its socket file goes away."""

    def __init__(self, path: str, add_services):
        self.path = path
        self.add_services = add_services
        self.server = None
        self.inode = None

    def ensure(self) -> bool:
        """Serving now; True when it (re)started."""
        from ..plugin import _identity
        if self.server is not None and _identity(self.path) == self.inode:
            return False
        if self.server is not None:
            log.warning("%s was removed: serving again", self.path)
        self.stop()
        import grpc
        from ..plugin import _remove_socket
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        _remove_socket(self.path)
        server = grpc.server(ThreadPoolExecutor(max_workers=8, thread_name_prefix="grpc"))
        self.add_services(server)
        if server.add_insecure_port(f"unix:{self.path}") == 0:
            raise RuntimeError(f"cannot listen on {self.path}")
        server.start()
        self.server, self.inode = server, _identity(self.path)
        log.info("serving on %s", self.path)
        return True

    def stop(self) -> None:
        from ..plugin import _identity, _remove_socket
        if self.server is None:
            return
        self.server.stop(1.0).wait(2.0)
        if _identity(self.path) == self.inode:
            _remove_socket(self.path)
        self.server = None


class DraPlugin:
    def __init__(self, driver, *, plugins_dir: str, registry_dir: str, watch_interval: float = 1.0,
                 resync_interval: float = 30.0):
        from .service import add_dra_services, add_registration_service
        self.driver = driver
        name = driver.driver_name
        self.endpoint = os.path.join(plugins_dir, name, "dra.sock")
        self.dra = Served(self.endpoint, lambda s: add_dra_services(s, driver))
        # Registered (again): publish again. The kubelet deletes a driver's slices some time after
        # its plugin goes away, and would not tell us.
        self.registration = Served(os.path.join(registry_dir, f"{name}-reg.sock"),
                                   lambda s: add_registration_service(
                                       s, name, self.endpoint, lambda ok, error: ok and self.changed()))
        self.watch_interval = watch_interval
        self.resync_interval = resync_interval
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.dirty = True
        self._next_resync = 0.0
        self._publish_error: Optional[str] = None
        driver.on_change = self.changed

    def changed(self) -> None:
        self.dirty = True
        self.wake.set()

    def request_stop(self, *_args) -> None:
        self.stop_event.set()
        self.wake.set()

    def step(self) -> None:
        self.dra.ensure()             # the endpoint first: the kubelet dials it once registered
        self.registration.ensure()
        if self.dirty:
            self.dirty = False
            try:
                self.driver.publish()
                self._publish_error = None
            except Exception as e:  # noqa: BLE001 - ApiError, connection errors: try next tick
                self.dirty = True
                if str(e) != self._publish_error:
                    log.error("cannot publish the ResourceSlice: %s; retrying", e)
                    self._publish_error = str(e)
        if time.monotonic() >= self._next_resync:
            # also check the slice is still there (someone may have deleted it)
            self._next_resync = time.monotonic() + self.resync_interval
            self.driver.resync()
            self.changed()

    def run(self, health_sources: List[HealthSource] = ()) -> int:
        board = HealthBoard([g.uuid for g in self.driver.gpus], self.driver.set_health)
        for source in health_sources:
            source.start(board)
        try:
            while not self.stop_event.is_set():
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - keep the plugin up; try again next tick
                    log.exception("watch step failed")
                self.wake.wait(self.watch_interval)
                self.wake.clear()
        finally:
            log.info("stopping")
            for source in health_sources:
                source.stop()
            self.registration.stop()
            self.dra.stop()
        return 0


def probe(args, timeout: float = 5.0) -> int:
    """--probe: a NodePrepareResources of no claims on the DRA socket (it changes nothing)."""
    try:
        import grpc
        from ..proto import dra_v1_pb2, dra_v1_pb2_grpc
    except ImportError as e:
        print(f"nvshare-dra-plugin: {e.name} is not installed; --probe needs the kubernetes extra: "
              f"{EXTRA_HINT}", file=sys.stderr)
        return 1
    path = os.path.join(args.kubelet_plugins_dir, args.driver_name, "dra.sock")
    try:
        with grpc.insecure_channel(f"unix:{path}") as ch:
            dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(),
                                                                   timeout=timeout)
    except grpc.RpcError as e:
        print(f"nvshare-dra-plugin: no answer on {path}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    return 0


def dry_run(args, gpus: List[GpuInfo], publishing: Publishing) -> int:
    """No cluster: --sharing=auto is consumable (the API server's version is not known)."""
    node = args.node_name or socket.gethostname()
    publishing = dataclasses.replace(publishing, mode=sharing_for(publishing.mode, None, len(gpus))[0])
    devices = slice_devices(device_specs(gpus, publishing), lambda uuid: True)
    print(json.dumps(resource_slice(args.driver_name, node, devices, 1), indent=2))
    return 0


def _install_library(args) -> None:
    source = args.library or default_library_source()
    if source is None:
        log.error("no libnvshare.so to install (pass --library); prepared containers will not find it")
        return
    try:
        clean_stale_temps(args.host_lib_dir)
        install_library(source, args.host_lib_dir)
    except OSError as e:
        log.error("cannot install %s into %s: %s", source, args.host_lib_dir, e)


def _health_sources(args, uuids: List[str]) -> List[HealthSource]:
    sources: List[HealthSource] = []
    if args.nvml_health != "off":
        sources.append(NvmlHealthMonitor(uuids, ignored_xids=args.ignored_xids,
                                         xid_recovery_s=args.xid_recovery_seconds))
    if args.health_file:
        sources.append(FileHealthSource(args.health_file, uuids, interval=args.health_file_interval))
    return sources


def _sharing(publishing: Publishing, api, gpus: int) -> Publishing:
    """--sharing resolved against the API server's version (inventory.sharing_for), asked only
    where it decides something."""
    server = None
    if publishing.mode in (AUTO, CONSUMABLE) and gpus > 1 and hasattr(api, "server_version"):
        try:
            server = api.server_version()
        except Exception as e:  # noqa: BLE001 - ApiError, an unreachable server: as if fixed
            log.warning("cannot read the API server's version (%s): --sharing=%s publishes consumable "
                        "capacity", e, publishing.mode)
    mode, warning = sharing_for(publishing.mode, server, gpus)
    if warning:
        log.warning("%s", warning)
    return dataclasses.replace(publishing, mode=mode)


def build(args, gpus: List[GpuInfo], publishing: Publishing, api=None):
    """The Driver and the DraPlugin for parsed flags (main's steps, callable from tests)."""
    from .api import KubeApi
    from .driver import Driver, SchedulerLink
    from .state import PreparedClaims
    api = api or KubeApi(args.kubeconfig)
    publishing = _sharing(publishing, api, len(gpus))
    injection = Injection(args.host_lib_dir, args.container_lib_dir, args.host_socket_dir,
                          args.container_socket_dir, dict(args.container_env))
    scheduler = SchedulerLink(args.scheduler_socket or os.path.join(args.host_socket_dir, SCHEDULER_SOCKET_NAME))
    driver = Driver(driver_name=args.driver_name, node=args.node_name, api=api,
                    gpus=gpus, publishing=publishing, injection=injection, cdi_dir=args.cdi_dir,
                    state=PreparedClaims(args.state_dir), scheduler=scheduler)
    plugin = DraPlugin(driver, plugins_dir=args.kubelet_plugins_dir, registry_dir=args.kubelet_registry_dir,
                       watch_interval=args.watch_interval, resync_interval=args.resync_interval)
    return driver, plugin


def main(argv: Optional[List[str]] = None, nvml=None, api=None) -> int:
    """`nvml` (a pynvml stand-in) and `api` (api.KubeApi's methods) are for tests."""
    parser = build_parser()
    args = parse_args(parser, argv)
    if args.probe:
        return probe(args)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.gpu_uuids:
        try:
            gpus = declared(args.gpu_uuids, dict(args.gpu_memory))
        except ValueError as e:
            parser.error(str(e))
    else:
        try:
            gpus = discover(nvml)
        except RuntimeError as e:
            log.error("no GPUs: %s (pass --gpu-uuids with --gpu-memory where NVML is unreachable)", e)
            return 1
    publishing = Publishing(args.sharing, args.slots, args.oversubscribe, dict(args.gpu_memory) or None)
    if args.dry_run:
        return dry_run(args, gpus, publishing)
    if not args.node_name:
        log.error("no node name: pass --node-name or set NODE_NAME (the chart sets it from spec.nodeName)")
        return 2
    try:
        import grpc  # noqa: F401
        import kubernetes  # noqa: F401
    except ImportError as e:
        print(f"nvshare-dra-plugin: {e.name} is not installed; it comes with the kubernetes extra: "
              f"{EXTRA_HINT}", file=sys.stderr)
        return 1
    if not gpus:
        log.warning("NVML found no GPUs on this node: publishing an empty slice")
    _install_library(args)
    try:
        _, plugin = build(args, gpus, publishing, api)
    except Exception as e:  # noqa: BLE001 - e.g. no in-cluster config
        log.error("cannot start: %s", e)
        return 1
    signal.signal(signal.SIGTERM, plugin.request_stop)
    signal.signal(signal.SIGINT, plugin.request_stop)
    return plugin.run(_health_sources(args, [g.uuid for g in gpus]))


if __name__ == "__main__":
    sys.exit(main())
