"""nvshare-device-plugin: the kubelet device plugin (API v1beta1) for ``nvshare.com/gpu``.

Lifecycle
  1. Find the GPUs (NVML, or --gpu-uuids), install libnvshare.so into --host-lib-dir atomically.
  2. Serve the DevicePlugin service on <device-plugin-dir>/<endpoint>, check that it answers, then
     register with the kubelet on <device-plugin-dir>/kubelet.sock.
  3. Watch both sockets (every --watch-interval seconds). A kubelet restart deletes every socket in
     the directory and re-creates kubelet.sock: when our socket is gone (or replaced) the server is
     started again, and whenever kubelet.sock is a new file the plugin registers again. A failed
     registration is retried with backoff; the process never exits for it.
  4. SIGTERM/SIGINT: stop serving, remove the socket, exit 0.

What a container gets from Allocate (see docs/kubernetes.md)
  env     LD_PRELOAD=<container-lib-dir>/libnvshare.so
          NVIDIA_VISIBLE_DEVICES=<physical GPU UUIDs, comma separated>
          NVSHARE_SOCK_PATH=<container-socket-dir>/scheduler.sock   (+ any --container-env)
  mounts  <host-lib-dir>    -> <container-lib-dir>    read-only
          <host-socket-dir> -> <container-socket-dir> read-only (the scheduler's socket directory)
  devices none by default (the NVIDIA container runtime injects them from NVIDIA_VISIBLE_DEVICES);
          --pass-device-specs adds /dev/nvidiactl, /dev/nvidia-uvm(-tools) and /dev/nvidia<minor>.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
import threading
import time
from typing import List, Optional

from .backoff import Backoff
from . import devices as dev
from . import plugin_metrics
from .health import FileHealthSource, HealthBoard, HealthSource, NvmlHealthMonitor
from .libinstall import clean_stale_temps, default_library_source, install_library
from ..envflags import parse_args
from .plugin_cli import build_parser
from .plugin_metrics import Heartbeat, PluginStats

EXTRA_HINT = "python3 -m pip install 'xpushare[kubernetes]'"
_missing_extra: Optional[ImportError] = None
try:  # grpcio and protobuf come with the kubernetes extra; main() names it when they are missing
    import grpc

    from .proto import deviceplugin_pb2 as pb
    from .proto import deviceplugin_pb2_grpc as pb_grpc
    from .service import AllocateConfig, DevicePluginService, DeviceState
except ImportError as e:
    if (e.name or "").split(".")[0] not in ("grpc", "google"):
        raise
    _missing_extra = e

log = logging.getLogger("nvshare-device-plugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


# ---------------------------------------------------------------------------------------------
# one serving instance on the plugin socket

class PluginServer:
    def __init__(self, socket_path: str, state: DeviceState, cfg: AllocateConfig, workers: int = 16,
                 stats: Optional[PluginStats] = None):
        self.socket_path = socket_path
        self.state = state
        self.cfg = cfg
        self.stats = stats
        self.workers = workers
        self.stopped = threading.Event()
        self.server: Optional[grpc.Server] = None
        self.inode: Optional[tuple] = None

    def start(self, ready_timeout: float = 5.0) -> None:
        directory = os.path.dirname(self.socket_path) or "."
        if not os.path.isdir(directory):
            raise RuntimeError(f"directory {directory} does not exist (is it the kubelet's device-plugin dir?)")
        _remove_socket(self.socket_path)
        from concurrent.futures import ThreadPoolExecutor
        self.server = grpc.server(ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="grpc"))
        service = DevicePluginService(self.state, self.cfg, self.stopped, self.stats)
        pb_grpc.add_DevicePluginServicer_to_server(service, self.server)
        try:
            if self.server.add_insecure_port(f"unix:{self.socket_path}") == 0:
                raise RuntimeError(f"cannot listen on {self.socket_path}")
            self.server.start()
            self.inode = _identity(self.socket_path)
            # the kubelet dials back as soon as Register returns: make sure we answer first
            with grpc.insecure_channel(f"unix:{self.socket_path}") as ch:
                pb_grpc.DevicePluginStub(ch).GetDevicePluginOptions(pb.Empty(), timeout=ready_timeout,
                                                                    wait_for_ready=True)
        except BaseException:
            self.stop(grace=0)
            raise
        log.info("serving on %s", self.socket_path)

    def alive(self) -> bool:
        """Our socket file is still the one we created."""
        return self.inode is not None and _identity(self.socket_path) == self.inode

    def stop(self, grace: float = 1.0) -> None:
        self.stopped.set()
        self.state.wake_all()
        if self.server is not None:
            self.server.stop(grace).wait(grace + 1.0)
        if self.inode is not None and self.alive():
            _remove_socket(self.socket_path)


def _remove_socket(path: str) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def _identity(path: str) -> Optional[tuple]:
    """(inode, ctime) of a socket file, None if absent: a re-created file differs even if its inode
    number is reused."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None


def register(kubelet_socket: str, endpoint: str, resource_name: str, timeout: float = 5.0) -> None:
    with grpc.insecure_channel(f"unix:{kubelet_socket}") as ch:
        grpc.channel_ready_future(ch).result(timeout=timeout)
        pb_grpc.RegistrationStub(ch).Register(pb.RegisterRequest(
            version=API_VERSION, endpoint=endpoint, resource_name=resource_name,
            options=pb.DevicePluginOptions(pre_start_required=False,
                                           get_preferred_allocation_available=True)),
            timeout=timeout)


# ---------------------------------------------------------------------------------------------
# the whole plugin

class DevicePlugin:
    def __init__(self, *, device_plugin_dir: str, endpoint: str, resource_name: str,
                 state: DeviceState, cfg: AllocateConfig, health_sources: List[HealthSource],
                 watch_interval: float = 1.0, max_backoff: float = 30.0,
                 stats: Optional[PluginStats] = None):
        self.dir = device_plugin_dir
        self.endpoint = endpoint
        self.resource_name = resource_name
        self.socket_path = os.path.join(device_plugin_dir, endpoint)
        self.kubelet_socket = os.path.join(device_plugin_dir, KUBELET_SOCKET)
        self.state = state
        self.cfg = cfg
        self.health_sources = health_sources
        self.watch_interval = watch_interval
        self.max_backoff = max_backoff
        self.stop_event = threading.Event()
        self.stats = stats if stats is not None else PluginStats()
        # /healthz: the loop ticks (a tick may wait 15 s on a server start and a registration)
        self.heartbeat = Heartbeat(max(30.0, 10 * watch_interval))
        self.server: Optional[PluginServer] = None
        self.registered_with: Optional[tuple] = None  # identity of the kubelet.sock we registered with
        self._next_try = 0.0
        self._retry = Backoff(max(watch_interval, 1.0), max(max_backoff, watch_interval, 1.0))
        self._said_waiting = False
        self._serve_error: Optional[str] = None

    def request_stop(self, *_args) -> None:
        self.stop_event.set()

    def _serve(self) -> bool:
        if self.server is not None:
            self.server.stop()
            self.server = None
        server = PluginServer(self.socket_path, self.state, self.cfg, stats=self.stats)
        try:
            server.start()
        except Exception as e:  # noqa: BLE001 - e.g. the directory is missing; try again next tick
            text = f"cannot serve on {self.socket_path}: {_rpc_text(e)}"
            if text != self._serve_error:
                log.error("%s; retrying", text)
                self._serve_error = text
            return False
        self._serve_error = None
        self.server = server
        self.registered_with = None  # a new server must be (re-)announced
        self._next_try = 0.0
        self._retry.succeeded()
        return True

    def step(self) -> None:
        """One watch tick: re-serve if our socket vanished, re-register if the kubelet is new."""
        if self.server is None or not self.server.alive():
            if self.server is not None:
                log.warning("%s was removed (kubelet restart?): serving again", self.socket_path)
            if not self._serve():
                return
        kubelet = _identity(self.kubelet_socket)
        if kubelet is None:
            if self.registered_with is not None or not self._said_waiting:
                log.warning("no %s: waiting for the kubelet", self.kubelet_socket)
                self._said_waiting = True
                self.registered_with = None
            return
        self._said_waiting = False
        if kubelet == self.registered_with or time.monotonic() < self._next_try:
            return
        try:
            register(self.kubelet_socket, self.endpoint, self.resource_name)
        except Exception as e:  # noqa: BLE001 - grpc.RpcError, FutureTimeoutError
            delay = self._retry.failed()
            self._next_try = time.monotonic() + delay
            self.stats.registration_failed()
            log.error("registration with the kubelet failed (%s); retrying in %.1fs",
                      _rpc_text(e), delay)
            return
        self.registered_with = kubelet
        self._retry.succeeded()
        self.stats.registered()
        log.info("registered %s with the kubelet (endpoint %s, API %s)", self.resource_name,
                 self.endpoint, API_VERSION)

    def run(self) -> int:
        board = HealthBoard([g.uuid for g in self.state.gpus], self.state.set_health)
        for source in self.health_sources:
            source.start(board)
        try:
            while not self.stop_event.is_set():
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - keep the plugin up; try again next tick
                    log.exception("watch step failed")
                self.heartbeat.beat()
                self.stop_event.wait(self.watch_interval)
        finally:
            log.info("stopping")
            for source in self.health_sources:
                source.stop()
            if self.server is not None:
                self.server.stop()
        return 0


def _rpc_text(e: Exception) -> str:
    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        return f"{e.code().name}: {e.details()}"
    return str(e) or type(e).__name__


def probe(socket_path: str, timeout: float = 5.0) -> int:
    """--probe: 0 when a plugin answers GetDevicePluginOptions on `socket_path`, else 1."""
    try:
        with grpc.insecure_channel(f"unix:{socket_path}") as ch:
            pb_grpc.DevicePluginStub(ch).GetDevicePluginOptions(pb.Empty(), timeout=timeout)
    except grpc.RpcError as e:
        print(f"nvshare-device-plugin: no answer on {socket_path}: {_rpc_text(e)}", file=sys.stderr)
        return 1
    return 0


def _discover(args) -> List[dev.PhysicalGPU]:
    if args.gpu_uuids:
        return args.gpu_uuids  # parsed by the flag's type (plugin_cli.gpu_list)
    return dev.discover_nvml()


def _nvml_usable() -> bool:
    try:
        import pynvml
        pynvml.nvmlInit()
        return True
    except Exception as e:  # noqa: BLE001
        log.info("NVML not available (%s): no NVML health checks", e)
        return False


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(build_parser(), argv)
    missing = _missing_extra or (plugin_metrics.missing_client() if args.metrics_port else None)
    if missing is not None:
        what = "--metrics-port needs" if missing.name == "prometheus_client" else "the device plugin needs"
        print(f"nvshare-device-plugin: {missing.name} is not installed; {what} the kubernetes extra: "
              f"{EXTRA_HINT}", file=sys.stderr)
        return 1
    if args.probe:
        return probe(os.path.join(args.device_plugin_dir, args.endpoint))
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        gpus = _discover(args)
    except (ValueError, RuntimeError) as e:
        log.error("no GPUs: %s (pass --gpu-uuids where NVML is unreachable)", e)
        return 1
    if not gpus:
        log.error("NVML found no GPUs on this node")
        return 1
    log.info("GPUs: %s; %d units each as %s", ", ".join(g.uuid for g in gpus), args.virtual_devices,
             args.resource_name)

    source = args.library or default_library_source()
    if source is None:
        log.error("no libnvshare.so to install (pass --library); Allocate will refuse until it is installed")
    else:
        try:
            clean_stale_temps(args.host_lib_dir)
            install_library(source, args.host_lib_dir)
        except OSError as e:
            log.error("cannot install %s into %s: %s; Allocate will refuse", source, args.host_lib_dir, e)

    state = DeviceState(gpus, args.virtual_devices)
    cfg = AllocateConfig(args.host_lib_dir, args.container_lib_dir, args.host_socket_dir,
                         args.container_socket_dir, dict(args.container_env), args.pass_device_specs)
    uuids = [g.uuid for g in gpus]
    sources: List[HealthSource] = []
    if args.nvml_health == "on" or (args.nvml_health == "auto" and _nvml_usable()):
        sources.append(NvmlHealthMonitor(uuids, ignored_xids=args.ignored_xids,
                                         xid_recovery_s=args.xid_recovery_seconds))
    if args.health_file:
        sources.append(FileHealthSource(args.health_file, uuids, interval=args.health_file_interval))

    plugin = DevicePlugin(device_plugin_dir=args.device_plugin_dir, endpoint=args.endpoint,
                          resource_name=args.resource_name, state=state, cfg=cfg,
                          health_sources=sources, watch_interval=args.watch_interval)
    signal.signal(signal.SIGTERM, plugin.request_stop)
    signal.signal(signal.SIGINT, plugin.request_stop)
    try:
        endpoint = plugin_metrics.start(args, plugin.stats, state, plugin.heartbeat.healthy)
    except OSError as e:
        log.error("cannot serve metrics on %s:%d: %s", args.metrics_address, args.metrics_port, e)
        return 1
    try:
        return plugin.run()
    finally:
        if endpoint is not None:
            endpoint.stop()


if __name__ == "__main__":
    sys.exit(main())
