"""A ResourceClaim's allocation, read into what a prepared claim gets: its GPUs and its limits.

Pure (dicts in, a ClaimPlan or a ClaimError out), so every refusal is unit-tested.

Where the limits come from:
* consumable devices: ``status.allocation.devices.results[].consumedCapacity`` (what the
  kube-scheduler set aside for the claim: ``memory`` bytes, ``compute`` percent);
* slot devices (the fallback): nothing is consumed; the claim's configuration parameters say;
* either way, the opaque configuration for this driver (``status.allocation.devices.config``, which
  carries the DeviceClass's and the claim's) may set ``computeShare``, and may lower, never raise,
  ``memoryLimit`` / ``computeLimit``, and may set ``latencySensitive`` (the cluster's policy: the
  claim's clients count as latency-sensitive, docs/protocol.md "Latency-sensitive clients"):

    config:
    - opaque:
        driver: gpu.nvshare.com
        parameters: {apiVersion: gpu.nvshare.com/v1alpha1, kind: GpuConfig,
                     computeShare: 2, memoryLimit: 8Gi, computeLimit: 30}

A process's limits are per GPU (libnvshare.so counts memory on each GPU it uses): a claim of several
GPUs gets the largest amount any of its devices carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Callable, Dict, List, Optional, Tuple

from ...wire import quota_ranges as ranges
from ...wire.ctlschema import Invalid, PodName, Uid
from .inventory import COMPUTE_FULL, DeviceSpec

PARAMETERS_API = "gpu.nvshare.com/v1alpha1"
PARAMETERS_KIND = "GpuConfig"
PARAMETER_FIELDS = ("computeShare", "memoryLimit", "computeLimit", "latencySensitive")


class ClaimError(ValueError):
    """A claim this node cannot prepare; the text goes back to the kubelet (and the pod's events)."""


@dataclass(frozen=True)
class Grant:
    request: str
    device: str          # the device's name in this node's pool
    gpu_uuid: str
    share_id: Optional[str] = None   # the allocation's shareID on a shared (consumable) device


@dataclass(frozen=True)
class Limits:
    memory: Optional[int] = None        # bytes per GPU; None: no limit
    compute: Optional[float] = None     # percent of the GPU's time; None: no limit
    share: Optional[float] = None       # weight; None: the default
    latency_sensitive: Optional[bool] = None  # None: not set by the claim

    def as_dict(self) -> dict:
        return {"memory": self.memory, "compute": self.compute, "share": self.share,
                "latency_sensitive": self.latency_sensitive}


@dataclass(frozen=True)
class ClaimPlan:
    uid: str
    namespace: str
    name: str
    pool: str
    grants: Tuple[Grant, ...]
    limits: Limits
    pods: Tuple[str, ...] = field(default=())    # UIDs of the pods the claim is reserved for

    @property
    def gpu_uuids(self) -> List[str]:
        return list(dict.fromkeys(g.gpu_uuid for g in self.grants))


CLAIM_NAME = PodName(hint="NAMESPACE/NAME of a ResourceClaim (a DNS label, a DNS subdomain)")


def check_uid(uid: str) -> None:
    """A claim's UID as the kubelet sends it, held to what Kubernetes gives before it names a file
    (cdi.py) or a record (state.py): ClaimError otherwise."""
    try:
        Uid().check("claim UID", uid)
    except Invalid as e:
        raise ClaimError(str(e)) from None


def check_ref(namespace: str, name: str, uid: str) -> None:
    """check_uid, and the namespace and name, before they name an API path."""
    check_uid(uid)
    try:
        CLAIM_NAME.check("claim", f"{namespace}/{name}")
    except Invalid as e:
        raise ClaimError(str(e)) from None


def quantity(value, what: str) -> Decimal:
    """A Kubernetes quantity ("8Gi", "30", "500m", 8589934592) as a Decimal."""
    try:
        from kubernetes.utils import parse_quantity
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, InvalidOperation):
        raise ClaimError(f"{what}: {value!r} is not a quantity") from None


def _parameters(allocation: dict, driver: str, requests: List[str]) -> Dict[str, dict]:
    """request name -> this driver's parameters that apply to it (later entries win, so the claim's
    own configuration, which the API lists after the class's, overrides the class's)."""
    out: Dict[str, dict] = {r: {} for r in requests}
    for entry in allocation.get("devices", {}).get("config") or []:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, dict):
            raise ClaimError(f"the {driver} configuration's parameters must be an object")
        if params.get("apiVersion", PARAMETERS_API) != PARAMETERS_API or \
                params.get("kind", PARAMETERS_KIND) != PARAMETERS_KIND:
            raise ClaimError(f"the {driver} configuration must be apiVersion {PARAMETERS_API}, kind "
                             f"{PARAMETERS_KIND} (got {params.get('apiVersion')!r}, {params.get('kind')!r})")
        unknown = sorted(set(params) - {"apiVersion", "kind", *PARAMETER_FIELDS})
        if unknown:
            raise ClaimError(f"unknown {PARAMETERS_KIND} field(s) {', '.join(unknown)}: it takes "
                             f"{', '.join(PARAMETER_FIELDS)}")
        for r in entry.get("requests") or requests:
            out.setdefault(r.split("/")[0], {}).update(params)
    return out


def _check(kind, what: str, value):
    try:
        return kind.check(what, value)
    except Invalid as e:
        raise ClaimError(str(e)) from None


def _grant_limits(result: dict, spec: DeviceSpec, params: dict) -> Tuple[int, float, Optional[float]]:
    """(memory bytes, compute percent, share) for one allocated device."""
    name = spec.name
    consumed = result.get("consumedCapacity") or {}
    if spec.shared:
        memory = quantity(consumed.get("memory", spec.memory), f"{name} consumed memory")
        compute = quantity(consumed.get("compute", COMPUTE_FULL), f"{name} consumed compute")
    else:
        memory, compute = Decimal(spec.memory), Decimal(COMPUTE_FULL)
    if memory > spec.memory:
        raise ClaimError(f"claim takes {memory} bytes of memory on {name} (GPU {spec.gpu.uuid}), more "
                         f"than its capacity of {spec.memory} bytes")
    if compute > COMPUTE_FULL or compute <= 0 or memory <= 0:
        raise ClaimError(f"claim takes compute {compute} and memory {memory} of {name}: compute must be "
                         f"from 1 to {COMPUTE_FULL} percent and memory above 0")
    if "memoryLimit" in params:
        memory = min(memory, quantity(params["memoryLimit"], "memoryLimit"))
    if "computeLimit" in params:
        compute = min(compute, quantity(params["computeLimit"], "computeLimit"))
    memory = _check(ranges.MEMORY_LIMIT, "memoryLimit", int(memory))
    compute = _check(ranges.COMPUTE_LIMIT, "computeLimit", float(compute))
    share = params.get("computeShare")
    if share is not None:
        share = _check(ranges.COMPUTE_SHARE, "computeShare", float(quantity(share, "computeShare")))
    return memory, compute, share


def _latency(params: dict) -> Optional[bool]:
    """latencySensitive: a boolean (its GPU's other clients keep their queues short); None: unset."""
    value = params.get("latencySensitive")
    if value is None or isinstance(value, bool):
        return value
    raise ClaimError(f"latencySensitive must be true or false, not {str(value)[:64]!r}")


def _share_id(result: dict, ref: str) -> Optional[str]:
    """The result's shareID (the allocator sets one per allocation of a shared device), checked:
    it goes back to the kubelet."""
    share = result.get("shareID")
    if share is None:
        return None
    try:
        return Uid().check(f"ResourceClaim {ref}: shareID", share)
    except Invalid as e:
        raise ClaimError(str(e)) from None


def plan(claim: dict, driver: str, pool: str, specs: Dict[str, DeviceSpec],
         healthy: Callable[[str], bool]) -> ClaimPlan:
    """What preparing `claim` on this node gives, or ClaimError saying why it cannot."""
    meta = claim.get("metadata") or {}
    ref = f"{meta.get('namespace')}/{meta.get('name')}"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"ResourceClaim {ref} is not allocated")
    results = [r for r in allocation.get("devices", {}).get("results") or [] if r.get("driver") == driver]
    if not results:
        drivers = sorted({r.get("driver", "?") for r in allocation.get("devices", {}).get("results") or []})
        raise ClaimError(f"ResourceClaim {ref} has no devices of driver {driver} "
                         f"(allocated by: {', '.join(drivers) or 'none'})")
    params = _parameters(allocation, driver, sorted({r.get("request", "") for r in results}))
    grants, memories, computes, shares = [], [], [], []
    for r in results:
        if r.get("pool") != pool:
            raise ClaimError(f"ResourceClaim {ref}: device {r.get('device')!r} is in pool {r.get('pool')!r}, "
                             f"not this node's ({pool})")
        spec = specs.get(r.get("device", ""))
        if spec is None:
            raise ClaimError(f"ResourceClaim {ref}: unknown device {r.get('device')!r} (this node has "
                             f"{', '.join(sorted(specs)) or 'none'})")
        if not healthy(spec.gpu.uuid):
            raise ClaimError(f"ResourceClaim {ref}: GPU {spec.gpu.uuid} ({spec.name}) is unhealthy")
        request = r.get("request", "")
        memory, compute, share = _grant_limits(r, spec, params.get(request.split("/")[0], {}))
        grants.append(Grant(request, spec.name, spec.gpu.uuid, _share_id(r, ref)))
        memories.append(memory)
        computes.append(compute)
        shares.append(share)
    compute = max(computes)
    limits = Limits(memory=max(memories), compute=None if compute >= COMPUTE_FULL else compute,
                    share=max((s for s in shares if s is not None), default=None))
    latency = [_latency(params.get(r.get("request", "").split("/")[0], {})) for r in results]
    latency = [v for v in latency if v is not None]
    limits = replace(limits, latency_sensitive=any(latency) if latency else None)
    pods = tuple(c.get("uid") for c in (claim.get("status") or {}).get("reservedFor") or []
                 if c.get("resource") == "pods" and c.get("uid"))
    return ClaimPlan(uid=meta.get("uid", ""), namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                     pool=pool, grants=tuple(grants), limits=limits, pods=pods)
