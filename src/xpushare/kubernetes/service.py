"""The DevicePlugin gRPC service (kubelet API v1beta1): thin handlers over DeviceState (the advertised
devices and their health) and AllocateConfig (what a container gets). plugin.py runs it."""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, List, Optional

import grpc

from . import devices as dev
from .libinstall import LIBRARY_NAME
from .plugin_metrics import PluginStats
from .proto import deviceplugin_pb2 as pb
from .proto import deviceplugin_pb2_grpc as pb_grpc

log = logging.getLogger("nvshare-device-plugin")

SCHEDULER_SOCKET_NAME = "scheduler.sock"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


# ---------------------------------------------------------------------------------------------
# device state shared by every server instance and stream

class DeviceState:
    """The advertised devices and their health; ListAndWatch streams wait on `cond`."""

    def __init__(self, gpus: List[dev.PhysicalGPU], units: int):
        self.gpus = list(gpus)
        self.by_uuid = {g.uuid: g for g in gpus}
        self.order = {g.uuid: g.index for g in gpus}
        self.units = units
        self.cond = threading.Condition()
        self.generation = 0
        self._healthy: Dict[str, bool] = {g.uuid: True for g in gpus}
        self._reason: Dict[str, str] = {}

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> None:
        with self.cond:
            if uuid not in self._healthy or self._healthy[uuid] == healthy:
                return
            self._healthy[uuid] = healthy
            self._reason[uuid] = reason
            self.generation += 1
            self.cond.notify_all()
        log.warning("GPU %s -> %s (%s); %d devices updated", uuid,
                    dev.HEALTHY if healthy else dev.UNHEALTHY, reason, self.units)

    def healthy(self, uuid: str) -> bool:
        with self.cond:
            return self._healthy.get(uuid, False)

    def healthy_locked(self, uuid: str) -> bool:
        return self._healthy.get(uuid, False)

    def wake_all(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def devices_locked(self) -> List[pb.Device]:
        out = []
        for gpu in self.gpus:
            health = dev.HEALTHY if self._healthy[gpu.uuid] else dev.UNHEALTHY
            topo = None
            if gpu.numa_node is not None:
                topo = pb.TopologyInfo(nodes=[pb.NUMANode(ID=gpu.numa_node)])
            for dev_id in dev.virtual_ids(gpu, self.units):
                out.append(pb.Device(ID=dev_id, health=health, topology=topo))
        return out


# ---------------------------------------------------------------------------------------------
# the DevicePlugin service

class AllocateConfig:
    def __init__(self, host_lib_dir: str, container_lib_dir: str, host_socket_dir: str,
                 container_socket_dir: str, extra_env: Dict[str, str], pass_device_specs: bool,
                 dev_root: str = "/"):
        self.host_lib_dir = host_lib_dir
        self.container_lib_dir = container_lib_dir
        self.host_socket_dir = host_socket_dir
        self.container_socket_dir = container_socket_dir
        self.extra_env = dict(extra_env)
        self.pass_device_specs = pass_device_specs
        self.dev_root = dev_root


class DevicePluginService(pb_grpc.DevicePluginServicer):
    def __init__(self, state: DeviceState, cfg: AllocateConfig, stopped: threading.Event,
                 stats: Optional[PluginStats] = None):
        self.state = state
        self.cfg = cfg
        self.stopped = stopped
        self.stats = stats if stats is not None else PluginStats()

    def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        last = None
        log.info("ListAndWatch: stream opened")
        self.stats.stream_opened()
        try:
            while not self.stopped.is_set() and context.is_active():
                with self.state.cond:
                    if self.state.generation == last:
                        self.state.cond.wait(timeout=1.0)
                    generation = self.state.generation
                    devices = self.state.devices_locked() if generation != last else None
                if devices is not None and not self.stopped.is_set():
                    last = generation
                    yield pb.ListAndWatchResponse(devices=devices)
        finally:
            self.stats.stream_closed()
        log.info("ListAndWatch: stream closed")

    def GetPreferredAllocation(self, request, context):
        units_per_gpu = {g.uuid: self.state.units for g in self.state.gpus}
        resp = pb.PreferredAllocationResponse()
        for creq in request.container_requests:
            ids = dev.preferred_allocation(list(creq.available_deviceIDs), list(creq.must_include_deviceIDs),
                                           creq.allocation_size, units_per_gpu, self.state.order)
            log.info("GetPreferredAllocation: size %d from %d available -> %s", creq.allocation_size,
                     len(creq.available_deviceIDs), ",".join(ids))
            resp.container_responses.add(deviceIDs=ids)
        return resp

    def Allocate(self, request, context):
        resp = pb.AllocateResponse()
        lib = os.path.join(self.cfg.host_lib_dir, LIBRARY_NAME)
        if not os.path.isfile(lib):
            msg = (f"{lib} is not installed on this node (the device plugin could not install "
                   f"libnvshare.so; see its log)")
            log.error("Allocate refused: %s", msg)
            self.stats.allocation_refused()
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, msg)
        for creq in request.container_requests:
            try:
                gpus = dev.check_allocation(creq.devices_ids, self.state.by_uuid, self.state.units)
            except dev.AllocationError as e:
                log.error("Allocate refused for %s: %s", ",".join(creq.devices_ids), e)
                self.stats.allocation_refused()
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            resp.container_responses.append(self._container_response(gpus))
            log.info("Allocate: %s -> GPUs %s", ",".join(creq.devices_ids),
                     ",".join(g.uuid for g in gpus))
        self.stats.allocated(sum(len(c.devices_ids) for c in request.container_requests))
        return resp

    def _container_response(self, gpus: List[dev.PhysicalGPU]) -> pb.ContainerAllocateResponse:
        cfg = self.cfg
        r = pb.ContainerAllocateResponse()
        r.envs.update(cfg.extra_env)
        r.envs["LD_PRELOAD"] = f"{cfg.container_lib_dir.rstrip('/')}/{LIBRARY_NAME}"
        r.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)
        r.envs["NVSHARE_SOCK_PATH"] = f"{cfg.container_socket_dir.rstrip('/')}/{SCHEDULER_SOCKET_NAME}"
        r.mounts.add(container_path=cfg.container_lib_dir, host_path=cfg.host_lib_dir, read_only=True)
        r.mounts.add(container_path=cfg.container_socket_dir, host_path=cfg.host_socket_dir, read_only=True)
        if cfg.pass_device_specs:
            paths = list(CONTROL_DEVICES) + [f"/dev/nvidia{g.minor}" for g in gpus if g.minor is not None]
            for path in paths:
                if os.path.exists(os.path.join(cfg.dev_root, path.lstrip("/"))):
                    r.devices.add(container_path=path, host_path=path, permissions="rw")
        return r

    def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()
