"""The node's GPUs and the devices nvshare-dra-plugin publishes for them in its ResourceSlice.

Pure except discover(), which asks NVML (pynvml, or any object with its functions: the tests inject
a fake). Two ways to publish a GPU:

* consumable (default, Kubernetes 1.34+ with the DRAConsumableCapacity feature, beta and on by
  default from 1.36): one device per GPU, ``gpu-<index>``, with ``allowMultipleAllocations: true``
  and two capacities that every claim on it consumes a part of: ``memory`` (bytes) and ``compute``
  (percent of the GPU's time). The kube-scheduler bin-packs claims by them.
* slots (clusters without consumable capacity): N devices per GPU, ``gpu-<index>-slot-<n>``, each
  allocated to one claim, as the device plugin's N units per GPU; a claim's limits then come from its
  configuration parameters (claims.py).

Memory is the card's (or the admin's --gpu-memory) times --oversubscribe: unified memory lets the
claims on one GPU add up to more than the card holds, the node's scheduler swapping them in turns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

CONSUMABLE, SLOTS, AUTO = "consumable", "slots", "auto"
# Kubernetes 1.34's allocator checks a candidate device's consumable capacity against the first
# device of its slice: on a node with several GPUs it refuses a claim that fits another GPU. Fixed
# in 1.35; one slice per GPU is no way around it (a claim of two GPUs then panics the 1.34 allocator).
CONSUMABLE_ON_SEVERAL_GPUS = (1, 35)
COMPUTE_FULL = 100               # the compute capacity: percent of one GPU's time
MEMORY_MIN = 1 << 20             # the smallest memory a claim may ask for (1 MiB)


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    index: int
    product: str
    memory: int                  # bytes, as NVML reports the card's total
    compute_capability: str      # "9.0"
    minor: Optional[int] = None
    declared: bool = False       # from --gpu-uuids: product, compute capability and card unknown


@dataclass(frozen=True)
class Publishing:
    """How GPUs become devices (the admin's flags)."""
    mode: str = CONSUMABLE
    slots: int = 4
    oversubscribe: float = 1.0
    gpu_memory: Optional[Dict[str, int]] = None   # uuid (or "*") -> bytes counted instead of the card's

    def memory_of(self, gpu: GpuInfo) -> int:
        base = gpu.memory
        if self.gpu_memory:
            base = self.gpu_memory.get(gpu.uuid, self.gpu_memory.get("*", base))
        return int(base * self.oversubscribe)


@dataclass(frozen=True)
class DeviceSpec:
    """One published device: the GPU behind it and what a claim on it may take."""
    name: str
    gpu: GpuInfo
    memory: int                  # bytes claims on it may consume together (consumable) or each (slots)
    shared: bool                 # consumable capacity (several claims on the one device)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover(nvml=None) -> List[GpuInfo]:
    """The GPUs NVML sees. RuntimeError when NVML is unusable (no driver, no library)."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError as e:  # pragma: no cover - a core dependency
            raise RuntimeError(f"nvidia-ml-py is not installed: {e}") from e
    try:
        nvml.nvmlInit()
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(h)
            try:
                minor = int(nvml.nvmlDeviceGetMinorNumber(h))
            except Exception:  # noqa: BLE001 - not every platform has device minors
                minor = None
            gpus.append(GpuInfo(uuid=_text(nvml.nvmlDeviceGetUUID(h)), index=i,
                                product=_text(nvml.nvmlDeviceGetName(h)),
                                memory=int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                                compute_capability=f"{major}.{minor_cc}", minor=minor))
        return gpus
    except Exception as e:  # pynvml raises NVMLError subclasses
        raise RuntimeError(f"NVML: {e}") from e


def sharing_for(requested: str, server: Optional[Tuple[int, int]], gpus: int) -> Tuple[str, Optional[str]]:
    """The mode to publish for --sharing `requested` (auto: consumable, but slots where the API
    server's allocator mis-checks consumable capacity: before 1.35 on a node of several GPUs), and
    a warning to log (None: nothing to say). `server`: the API server's (major, minor), None when
    unknown (taken as fixed)."""
    if requested not in (AUTO, CONSUMABLE) or server is None or server >= CONSUMABLE_ON_SEVERAL_GPUS \
            or gpus < 2:
        return (CONSUMABLE if requested == AUTO else requested), None
    why = (f"the API server is Kubernetes {server[0]}.{server[1]}, whose allocator checks consumable "
           f"capacity against the first GPU of a node's slice, refusing claims that fit another of "
           f"this node's {gpus} GPUs (fixed in 1.35)")
    if requested == AUTO:
        return SLOTS, why + "; publishing slots (--sharing=consumable publishes consumable capacity anyway)"
    return CONSUMABLE, why + "; publishing consumable capacity, as --sharing=consumable says"


def declared(physical, memory: Optional[Dict[str, int]]) -> List[GpuInfo]:
    """GPUs declared by --gpu-uuids (devices.PhysicalGPU), NVML not asked: each one's memory must
    come from --gpu-memory (uuid or "*" -> bytes). ValueError names the first one without."""
    memory = memory or {}
    out = []
    for g in physical:
        size = memory.get(g.uuid, memory.get("*"))
        if size is None:
            raise ValueError(f"GPU {g.uuid} has no memory: with --gpu-uuids, give --gpu-memory SIZE "
                             f"or --gpu-memory {g.uuid}=SIZE")
        out.append(GpuInfo(uuid=g.uuid, index=g.index, product="", memory=size, compute_capability="",
                           minor=g.minor, declared=True))
    return out


def device_specs(gpus: List[GpuInfo], how: Publishing) -> Dict[str, DeviceSpec]:
    """Every device this node can publish, by name (unhealthy GPUs included: slice_devices leaves
    them out, and a claim already on one is refused by name, not as unknown)."""
    out: Dict[str, DeviceSpec] = {}
    for g in gpus:
        memory = how.memory_of(g)
        if how.mode == CONSUMABLE:
            out[f"gpu-{g.index}"] = DeviceSpec(f"gpu-{g.index}", g, memory, True)
        else:
            for n in range(how.slots):
                name = f"gpu-{g.index}-slot-{n}"
                out[name] = DeviceSpec(name, g, memory, False)
    return out


def _version(cc: str) -> str:
    """A compute capability as the semantic version a DRA version attribute must be ("9.0.0")."""
    parts = re.findall(r"\d+", cc)[:3]
    return ".".join((parts + ["0", "0", "0"])[:3])


def slice_device(spec: DeviceSpec) -> dict:
    """The device's entry in a resource.k8s.io/v1 ResourceSlice."""
    g = spec.gpu
    attributes = {"uuid": {"string": g.uuid}, "index": {"int": g.index}}
    if not g.declared:  # what only NVML knows
        attributes.update(productName={"string": g.product},
                          cudaComputeCapability={"version": _version(g.compute_capability)},
                          memoryPhysical={"int": g.memory})
    attributes["sharing"] = {"string": CONSUMABLE if spec.shared else SLOTS}
    entry = {
        "name": spec.name,
        "attributes": attributes,
        "capacity": {"memory": {"value": str(spec.memory)}, "compute": {"value": str(COMPUTE_FULL)}},
    }
    if spec.shared:
        # A claim that names no amount takes the whole GPU, as a claim on an unshared GPU would.
        entry["allowMultipleAllocations"] = True
        entry["capacity"]["memory"]["requestPolicy"] = {
            "default": str(spec.memory), "validRange": {"min": str(MEMORY_MIN), "max": str(spec.memory)}}
        entry["capacity"]["compute"]["requestPolicy"] = {
            "default": str(COMPUTE_FULL),
            "validRange": {"min": "1", "max": str(COMPUTE_FULL), "step": "1"}}
    return entry


def slice_devices(specs: Dict[str, DeviceSpec], healthy) -> List[dict]:
    """The devices to publish: those of GPUs `healthy(uuid)` says are usable, in name order."""
    return [slice_device(s) for name, s in sorted(specs.items(), key=lambda kv: (kv[1].gpu.index, kv[0]))
            if healthy(s.gpu.uuid)]


def resource_slice(driver: str, node: str, devices: List[dict], generation: int) -> dict:
    """This node's one ResourceSlice (its pool is named after the node)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(driver, node),
                     "labels": {"app.kubernetes.io/managed-by": "nvshare-dra-plugin"}},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def slice_name(driver: str, node: str) -> str:
    return f"{node}-{driver}"
