"""Physical GPUs, the virtual devices advertised for them, and how units are placed on them.

Pure data and pure functions (no gRPC, no NVML calls except in discover_nvml()), so the placement
policy is unit-testable.

Device IDs are ``<GPU-UUID>::<n>`` with n in 0..N-1 (the replica form dcgm-exporter maps to its
physical GPU). Every unit of one GPU gives the container the whole GPU (its memory is managed by
libnvshare.so and the node's nvshare-scheduler), so the unit count only bounds how many containers
share one GPU.

Multi-unit requests (decision): a container asking for k units gets k *distinct* physical GPUs.
Two units of one GPU would add nothing (each unit already sees all of the GPU), so Allocate refuses
them with a clear error; GetPreferredAllocation always proposes distinct GPUs when the available list
has enough of them, so the kubelet (which follows a valid preference) normally never asks for that.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

log = logging.getLogger(__name__)

ID_SEPARATOR = "::"
MAX_DEVICE_ID_LEN = 63  # kubelet limit on Device.ID
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")


@dataclass(frozen=True)
class PhysicalGPU:
    uuid: str
    index: int                       # position on the node (NVML index, or order given)
    numa_node: Optional[int] = None  # None: unknown / not NUMA
    minor: Optional[int] = None      # /dev/nvidia<minor>, when known


class AllocationError(ValueError):
    """A request the plugin refuses; the message goes back to the kubelet (and the pod's events)."""


def device_id(uuid: str, n: int) -> str:
    return f"{uuid}{ID_SEPARATOR}{n}"


def split_device_id(dev_id: str):
    """'GPU-x::3' -> ('GPU-x', 3); ValueError for anything else."""
    uuid, sep, n = dev_id.rpartition(ID_SEPARATOR)
    if not sep or not uuid or not n.isdigit():
        raise ValueError(f"not a nvshare device ID: {dev_id!r}")
    return uuid, int(n)


def virtual_ids(gpu: PhysicalGPU, count: int) -> List[str]:
    return [device_id(gpu.uuid, n) for n in range(count)]


def validate_uuid(uuid: str) -> str:
    if not _UUID_RE.match(uuid):
        raise ValueError(f"not a GPU UUID: {uuid!r} (expected GPU-xxxxxxxx-xxxx-...)")
    if len(device_id(uuid, 999)) > MAX_DEVICE_ID_LEN:
        raise ValueError(f"GPU UUID too long for a device ID: {uuid!r}")
    return uuid


def parse_gpu_list(spec: str) -> List[PhysicalGPU]:
    """Parse --gpu-uuids: ``UUID[:numa=N][:minor=M][,UUID...]``.

    Example: ``GPU-aaaa...:numa=0:minor=0,GPU-bbbb...:numa=1``. Order gives the index.
    """
    gpus: List[PhysicalGPU] = []
    seen = set()
    for index, item in enumerate(p.strip() for p in spec.split(",") if p.strip()):
        uuid, *attrs = item.split(":")
        validate_uuid(uuid)
        if uuid in seen:
            raise ValueError(f"GPU UUID listed twice: {uuid}")
        seen.add(uuid)
        numa = minor = None
        for attr in attrs:
            key, eq, value = attr.partition("=")
            if not eq or not value.lstrip("-").isdigit():
                raise ValueError(f"bad GPU attribute {attr!r} in {item!r} (want numa=N or minor=M)")
            if key == "numa":
                numa = int(value) if int(value) >= 0 else None
            elif key == "minor":
                minor = int(value)
            else:
                raise ValueError(f"unknown GPU attribute {key!r} in {item!r} (want numa or minor)")
        gpus.append(PhysicalGPU(uuid=uuid, index=index, numa_node=numa, minor=minor))
    if not gpus:
        raise ValueError("no GPU UUIDs given")
    return gpus


def _sysfs_numa_node(pci_bus_id: str, sys_root: str = "/sys") -> Optional[int]:
    """NUMA node of a PCI device from sysfs; NVML prints 8-digit domains, sysfs uses 4."""
    bus_id = pci_bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    candidates = [bus_id]
    if len(domain) > 4:
        candidates.append(domain[-4:] + ":" + rest)
    for cand in candidates:
        try:
            with open(os.path.join(sys_root, "bus/pci/devices", cand, "numa_node")) as f:
                node = int(f.read().strip())
            return node if node >= 0 else None
        except (OSError, ValueError):
            continue
    return None


def discover_nvml(nvml=None, sys_root: str = "/sys") -> List[PhysicalGPU]:
    """The node's GPUs from NVML (pynvml). Raises RuntimeError when NVML is unusable."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError as e:  # pragma: no cover - nvidia-ml-py is a core dependency
            raise RuntimeError(f"nvidia-ml-py is not installed: {e}") from e
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        gpus = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(h)
            if isinstance(uuid, bytes):
                uuid = uuid.decode()
            numa = None
            try:
                bus_id = nvml.nvmlDeviceGetPciInfo(h).busId
                if isinstance(bus_id, bytes):
                    bus_id = bus_id.decode()
                numa = _sysfs_numa_node(bus_id, sys_root)
            except Exception:  # noqa: BLE001 - topology is best effort
                pass
            minor = None
            try:
                minor = int(nvml.nvmlDeviceGetMinorNumber(h))
            except Exception:  # noqa: BLE001
                pass
            gpus.append(PhysicalGPU(uuid=validate_uuid(uuid), index=i, numa_node=numa, minor=minor))
        return gpus
    except RuntimeError:
        raise
    except Exception as e:  # pynvml raises NVMLError subclasses
        raise RuntimeError(f"NVML: {e}") from e


# ---------------------------------------------------------------------------------------------
# placement

def preferred_allocation(available: Sequence[str], must_include: Sequence[str], size: int,
                         units_per_gpu: Dict[str, int],
                         gpu_order: Optional[Dict[str, int]] = None) -> List[str]:
    """Pick `size` device IDs from `available` (plus `must_include`), spreading over physical GPUs.

    Load of a GPU = its advertised units minus its units in `available` (what the kubelet has
    already handed out, or that are unhealthy), plus the units this request has already taken.
    Each step takes a GPU the request does not use yet with the least load (ties: most free units,
    then node order), and on it the lowest-numbered free unit. Only when no unused GPU is left does it
    fall back to sharing one (best effort: Allocate will refuse such a request; see module doc).
    """
    order = gpu_order or {}
    chosen: List[str] = []
    for dev in must_include:
        if dev not in chosen:
            chosen.append(dev)
    free: Dict[str, List[int]] = {}
    for dev in available:
        if dev in chosen:
            continue
        try:
            uuid, n = split_device_id(dev)
        except ValueError:
            continue
        free.setdefault(uuid, []).append(n)
    for units in free.values():
        units.sort()
    avail_count = Counter()
    for dev in available:
        try:
            avail_count[split_device_id(dev)[0]] += 1
        except ValueError:
            pass
    taken = Counter()
    for dev in chosen:
        try:
            taken[split_device_id(dev)[0]] += 1
        except ValueError:
            pass

    def load(uuid: str) -> int:
        return units_per_gpu.get(uuid, avail_count[uuid]) - avail_count[uuid] + taken[uuid]

    while len(chosen) < size:
        candidates = [u for u, units in free.items() if units]
        if not candidates:
            break
        fresh = [u for u in candidates if taken[u] == 0]
        pool = fresh or candidates
        best = min(pool, key=lambda u: (load(u), -len(free[u]), order.get(u, 1 << 30), u))
        n = free[best].pop(0)
        chosen.append(device_id(best, n))
        taken[best] += 1
    return chosen[:max(size, len(must_include))]


def check_allocation(device_ids: Iterable[str], known: Dict[str, PhysicalGPU],
                     units: int) -> List[PhysicalGPU]:
    """The physical GPUs for one container's device IDs, in request order; AllocationError if refused."""
    gpus: List[PhysicalGPU] = []
    per_gpu = Counter()
    for dev in device_ids:
        try:
            uuid, n = split_device_id(dev)
        except ValueError:
            raise AllocationError(f"unknown device ID {dev!r}: not advertised by this plugin") from None
        gpu = known.get(uuid)
        if gpu is None or n >= units:
            raise AllocationError(f"unknown device ID {dev!r}: not advertised by this plugin")
        per_gpu[uuid] += 1
        if per_gpu[uuid] == 1:
            gpus.append(gpu)
    doubled = sorted(u for u, c in per_gpu.items() if c > 1)
    if doubled:
        total = sum(per_gpu.values())
        raise AllocationError(
            f"nvshare.com/gpu: this container got {total} units on {len(per_gpu)} physical GPU(s) "
            f"({', '.join(doubled)} more than once). Each unit already gives the whole GPU, so a "
            f"container's units must be distinct physical GPUs; request at most as many units as "
            f"the node has GPUs with free units")
    if not gpus:
        raise AllocationError("empty device list")
    return gpus
