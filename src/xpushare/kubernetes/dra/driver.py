"""Prepare and unprepare claims, publish the slice: the steps of the other modules, in an order that
leaves nothing half-done.

Prepare: a claim already prepared answers from the state file (its CDI spec rewritten if it went
missing); otherwise the claim is read from the API server and checked whole (claims.plan) before
anything is written; then the CDI spec, then the state file (on a failure the spec is removed again);
then the node's scheduler is told the claim's limits for its pods. The scheduler is told on a best
effort: the spec's environment already carries the limits to the library, and resync() tells it again
(after a restart of either side). Unprepare removes the spec, then the state entry, then the limits.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from . import cdi
from .api import ApiError
from .claims import ClaimError, ClaimPlan, check_ref, check_uid, plan
from .inventory import DeviceSpec, GpuInfo, Publishing, device_specs, resource_slice, slice_devices, slice_name
from .state import PreparedClaims

log = logging.getLogger("nvshare-dra-plugin")


@dataclass(frozen=True)
class PreparedDevice:
    request: str
    pool: str
    device: str
    cdi_ids: tuple
    share_id: Optional[str] = None


class SchedulerLink:
    """The node's nvshare-scheduler, over its socket (control ops set_claim / clear_claim)."""

    def __init__(self, socket_path: str, timeout: float = 2.0):
        self.socket_path = socket_path
        self.timeout = timeout

    def _request(self, op: str, **fields) -> dict:
        from ...cli.client import CtlClient
        with CtlClient(self.socket_path, timeout=self.timeout) as c:
            return c.request(op, **fields)

    def set_claim(self, p: ClaimPlan) -> None:
        fields = {"memory_limit": p.limits.memory if p.limits.memory is not None else "none",
                  "compute_limit": p.limits.compute if p.limits.compute is not None else "none"}
        if p.limits.share is not None:
            fields["compute_share"] = p.limits.share
        if p.limits.latency_sensitive is not None:
            fields["latency_sensitive"] = "on" if p.limits.latency_sensitive else "off"
        for pod in p.pods:
            reply = self._request("set_claim", claim=p.uid, pod_uid=pod, **fields)
            if not reply.get("ok"):
                raise RuntimeError(reply.get("error"))

    def clear_claim(self, uid: str) -> None:
        reply = self._request("clear_claim", claim=uid)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("error"))


class Driver:
    def __init__(self, *, driver_name: str, node: str, api, gpus: List[GpuInfo], publishing: Publishing,
                 injection: cdi.Injection, cdi_dir: str, state: PreparedClaims,
                 scheduler: Optional[SchedulerLink] = None):
        self.driver_name = driver_name
        self.node = node
        self.api = api
        self.gpus = gpus
        self.specs: Dict[str, DeviceSpec] = device_specs(gpus, publishing)
        self.injection = injection
        self.cdi_dir = cdi_dir
        self.state = state
        self.scheduler = scheduler
        self._healthy = {g.uuid: True for g in gpus}
        self._publish_lock = threading.Lock()
        self._published: Optional[list] = None
        self.on_change: Callable[[], None] = lambda: None   # main wakes its publish loop

    # -- health ----------------------------------------------------------------------------------
    def healthy(self, uuid: str) -> bool:
        return self._healthy.get(uuid, False)

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> None:
        if self._healthy.get(uuid) is None or self._healthy[uuid] == healthy:
            return
        self._healthy[uuid] = healthy
        log.warning("GPU %s is %s (%s): %s the ResourceSlice", uuid, "healthy" if healthy else "unhealthy",
                    reason, "back in" if healthy else "taken out of")
        self.on_change()

    # -- the slice -------------------------------------------------------------------------------
    def desired_slice(self, generation: int = 1) -> dict:
        return resource_slice(self.driver_name, self.node, slice_devices(self.specs, self.healthy), generation)

    def publish(self) -> bool:
        """Make this node's ResourceSlice what the inventory says; True when it was written. Slices
        of this node and driver under other names (an older plugin's) are deleted."""
        with self._publish_lock:
            want = self.desired_slice()
            name = want["metadata"]["name"]
            existing = {s["metadata"]["name"]: s for s in self.api.list_slices(self.driver_name, self.node)}
            for other in sorted(set(existing) - {name}):
                self.api.delete_slice(other)
            current = existing.get(name)
            if current is not None and _same(current.get("spec", {}).get("devices"), want["spec"]["devices"]):
                self._published = want["spec"]["devices"]
                return False
            if current is None:
                self.api.create_slice(want)
            else:
                want["spec"]["pool"]["generation"] = int(current["spec"]["pool"].get("generation", 0)) + 1
                self.api.replace_slice(want)
            self._published = want["spec"]["devices"]
            log.info("ResourceSlice %s: %d devices (generation %d)", name, len(want["spec"]["devices"]),
                     want["spec"]["pool"]["generation"])
            return True

    def unpublish(self) -> None:
        try:
            self.api.delete_slice(slice_name(self.driver_name, self.node))
        except ApiError as e:
            if e.status != 404:
                raise

    # -- claims ----------------------------------------------------------------------------------
    def _devices(self, p: ClaimPlan) -> List[PreparedDevice]:
        """One CDI device carries the whole claim (all its GPUs in one NVIDIA_VISIBLE_DEVICES). The
        kubelet hands a container the CDI IDs of every device of the requests it uses, without
        removing repeats: the ID goes on the first device of each request only, so that a
        container of a one-request claim of several GPUs gets it once."""
        ids, seen, out = (cdi.device_id(p.uid),), set(), []
        for g in p.grants:
            out.append(PreparedDevice(g.request, p.pool, g.device, () if g.request in seen else ids,
                                      g.share_id))
            seen.add(g.request)
        return out

    def prepare(self, namespace: str, uid: str, name: str) -> List[PreparedDevice]:
        """ClaimError (the claim cannot be prepared here), ApiError (try again) or the devices."""
        check_ref(namespace, name, uid)
        with self.state.lock:
            done = self.state.get(uid)
            if done is not None:
                if not os.path.exists(cdi.spec_path(self.cdi_dir, uid)):
                    cdi.write(self.cdi_dir, done, self.injection)
                return self._devices(done)
            claim = self.api.get_claim(namespace, name)
            got_uid = (claim.get("metadata") or {}).get("uid")
            if got_uid != uid:
                raise ClaimError(f"ResourceClaim {namespace}/{name} has UID {got_uid}, not {uid} "
                                 "(deleted and created again?)")
            p = plan(claim, self.driver_name, self.node, self.specs, self.healthy)
            cdi.write(self.cdi_dir, p, self.injection)
            try:
                self.state.put(p)
            except BaseException:
                cdi.remove(self.cdi_dir, uid)
                raise
        log.info("prepared %s/%s (%s): GPUs %s, limits %s, pods %s", namespace, name, uid,
                 ",".join(p.gpu_uuids), p.limits.as_dict(), ",".join(p.pods) or "none")
        self._tell(p)
        return self._devices(p)

    def unprepare(self, uid: str) -> None:
        check_uid(uid)
        with self.state.lock:
            cdi.remove(self.cdi_dir, uid)
            known = self.state.drop(uid)
        if known:
            log.info("unprepared %s", uid)
        if self.scheduler is not None:
            try:
                self.scheduler.clear_claim(uid)
            except Exception as e:  # noqa: BLE001 - the scheduler forgets it with the pod anyway
                log.warning("could not clear claim %s in the scheduler: %s", uid, e)

    def _tell(self, p: ClaimPlan) -> bool:
        if self.scheduler is None or not p.pods:
            return True
        try:
            self.scheduler.set_claim(p)
            return True
        except Exception as e:  # noqa: BLE001 - OSError (no scheduler), refusals
            log.warning("could not tell the scheduler claim %s's limits (%s); the container's "
                        "environment carries them, and they are sent again later", p.uid, e)
            return False

    def resync(self) -> int:
        """Tell the scheduler every prepared claim's limits again; how many it took."""
        with self.state.lock:
            plans = list(self.state.claims.values())
        return sum(self._tell(p) for p in plans)


def _same(published, wanted) -> bool:
    """Whether the API server's copy of the devices says what we would write. It returns quantities
    in canonical form ("85899345920" comes back as "80Gi"), so those are compared by value."""
    def canonical(devices):
        from .claims import quantity
        out = []
        for d in devices or []:
            d = {**d, "capacity": {name: _quantities(cap, quantity) for name, cap in (d.get("capacity") or {}).items()}}
            out.append(d)
        return out
    try:
        return canonical(published) == canonical(wanted)
    except ValueError:
        return False


def _quantities(value, quantity):
    if isinstance(value, dict):
        return {k: _quantities(v, quantity) for k, v in value.items()}
    if isinstance(value, list):
        return [_quantities(v, quantity) for v in value]
    return quantity(value, "capacity")
