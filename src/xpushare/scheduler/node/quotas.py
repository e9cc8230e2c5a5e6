"""Per-client quotas: compute limit, compute share and memory limit, and where each comes from.

Four sources set them (and whether the client is latency-sensitive, latency.py), field by field:
- the environment the process was started with (NVSHARE_COMPUTE_LIMIT, NVSHARE_COMPUTE_SHARE,
  NVSHARE_GPU_MEMORY_LIMIT), which the library sends once in SETTINGS; unless the process is an
  admin's, outside a pod, a user's declared shares count in their ratio with the largest at most
  the default (policy/declared.py, own_shares: rescaled as the user's processes come and go);
- the pod's annotations (nvshare.com/gpu-compute-limit, -share, -memory-limit,
  nvshare.com/latency-sensitive), from the pod watch
  (kubernetes/pod_watch.py), matched to clients by the pod UID of their cgroup (peer identity);
- the pod's DRA ResourceClaims (gpu.nvshare.com): nvshare-dra-plugin sends what the cluster
  allocated (set_claim / clear_claim control ops) when it prepares a claim for a pod;
- nvsharectl --set-compute-limit / --set-compute-share / --set-memory-limit, for one client (its pid
  or client id) or for a pod (NAMESPACE/NAME: its clients now and those that come later).
For each field the most recent of the claim, the annotation and nvsharectl applies, else the
environment: an operator's command is not undone by an annotation that was there before it, and an
annotation edited after a command applies. "none" from either is a value (no limit), not the absence
of one. A field a claim sets is not taken from the pod's annotations: the cluster placed the pod by
what it claimed, and the pod's own annotation must not raise it (an operator's nvsharectl may).

Where the effective values go, whenever they change: the compute and memory limits to the library in
LIMITS (only to a client that sent SETTINGS: an older library would take the unknown message as a
malformed frame), which enforces them (the gate for compute, allocations for memory); the share to
the policy (Arbiter.set_share on each GPU the client attached), which scales its quanta.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from ...wire.protocol import COMPUTE_LIMIT_SCALE, COMPUTE_SHARE_SCALE, Limits, ProtocolError, Settings, encode
from . import latency
from .access import may_raise_itself
from ..policy import own_shares

if TYPE_CHECKING:
    from ..shell.connection import Conn
    from .registry import Gpu
    from .state import SchedulerState

log = logging.getLogger("nvshare.scheduler")

NAMES = ("compute_limit", "compute_share", "memory_limit", "latency_sensitive")
SOURCES = ("environment", "claim", "annotation", "nvsharectl")


@dataclass(frozen=True)
class Quota:
    """One client's values; None: none set (no limit; the default share)."""
    compute_limit: float | None = None   # fraction of the GPU's time, (0, 1]
    compute_share: float | None = None   # a weight > 0
    memory_limit: int | None = None      # bytes per GPU
    # Others keep their queue short while it is attached (latency.py); its environment's is
    # HELLO's flag as it counts (Conn.latency_env), never SETTINGS'.
    latency_sensitive: bool | None = None

    def limits(self) -> Limits:
        limit = self.compute_limit
        return Limits(compute_limit=0 if limit is None else max(1, round(limit * COMPUTE_LIMIT_SCALE)),
                      memory_limit=self.memory_limit or 0)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _tenant(conn: Conn) -> tuple:
    """Whose declared shares are scaled together: the pod's processes in a pod (where pods of many
    tenants often share a uid, root), else the user's. One tenant's declarations never move
    another's."""
    return ("pod", conn.pod.uid) if conn.pod is not None else ("uid", conn.uid)


def from_settings(msg: Settings) -> Quota:
    """SETTINGS' fields (0 = not set); ProtocolError for a value out of range."""
    if msg.compute_limit > COMPUTE_LIMIT_SCALE:
        raise ProtocolError(f"SETTINGS compute_limit {msg.compute_limit} is over "
                            f"{COMPUTE_LIMIT_SCALE} per mille")
    return Quota(compute_limit=msg.compute_limit / COMPUTE_LIMIT_SCALE or None,
                 compute_share=msg.compute_share / COMPUTE_SHARE_SCALE or None,
                 memory_limit=msg.memory_limit or None)


class Quotas:
    """The sources other than the environment, and the bridge to clients and arbiters.

    `annotations` and `by_pod` hold, per pod, field -> (value, when): `when` is a counter that
    orders every setting of every source, so that the most recent one wins (a client's own
    nvsharectl settings live on its Conn, `quota_set`)."""

    def __init__(self, state: SchedulerState):
        self.state = state
        self._when = itertools.count(1)
        self.annotations: dict[str, dict[str, tuple]] = {}          # pod uid -> field -> (value, when)
        self.by_pod: dict[tuple[str, str], dict[str, tuple]] = {}   # (namespace, name) -> ...
        self.claims: dict[str, dict[str, dict[str, tuple]]] = {}    # pod uid -> claim uid -> ...
        self.declared: dict[tuple, dict[Conn, float]] = {}  # tenant -> its ungoverned declared shares

    # -- what applies --------------------------------------------------------------------------
    def layers(self, conn: Conn) -> list[tuple[str, dict[str, tuple]]]:
        pod = conn.pod
        found = [("nvsharectl", conn.quota_set)]
        if pod is not None:
            claimed: dict[str, tuple] = {}
            for layer in self.claims.get(pod.uid, {}).values():
                claimed.update((k, v) for k, v in layer.items() if k not in claimed or v[1] > claimed[k][1])
            found.append(("claim", claimed))
            annotated = self.annotations.get(pod.uid, {})
            found.append(("annotation", {k: v for k, v in annotated.items() if k not in claimed}))
            if pod.namespace and pod.name:
                found.append(("nvsharectl", self.by_pod.get((pod.namespace, pod.name), {})))
        return found

    def effective(self, conn: Conn) -> tuple[Quota, dict[str, str]]:
        """The client's values, and the source of each ("environment" when nothing else set it)."""
        env = conn.quota_env or Quota()
        values, sources = {}, {}
        for name in NAMES:
            best = None
            for source, layer in self.layers(conn):
                if name in layer and (best is None or layer[name][1] > best[1][1]):
                    best = (source, layer[name])
            if best is None:
                values[name] = (conn.latency_env or None if name == "latency_sensitive"
                                else getattr(env, name))
                sources[name] = "environment"
            else:
                values[name], sources[name] = best[1][0], best[0]
        return Quota(**values), sources

    def refresh(self, conn: Conn) -> None:
        """Carry the client's effective values out where they changed: LIMITS to the library, the
        share to the arbiters of its GPUs."""
        if conn.closed or conn.hello is None:
            return
        quota, _ = self.effective(conn)
        old, conn.quota = conn.quota, quota
        if conn.quota_env is not None and quota.limits() != conn.quota_sent:
            conn.quota_sent = quota.limits()
            conn.send(encode(conn.quota_sent))
            self.state.client_log.info(conn, "limits pid=%d client=%d compute=%s memory=%s",
                                       conn.pid, conn.id, _pct(quota.compute_limit),
                                       quota.memory_limit or "none")
        if quota.compute_share != old.compute_share and conn.gpus():
            self.state.registry.set_share(conn, quota.compute_share)
        if bool(quota.latency_sensitive) != bool(old.latency_sensitive):
            self.state.client_log.info(conn, "latency-sensitive pid=%d client=%d %s", conn.pid,
                                       conn.id, "on" if quota.latency_sensitive else "off")
            latency.changed(self.state, conn)

    def attached(self, conn: Conn, gpu: Gpu) -> None:
        """Tell the policy the client's share (after ATTACH; refresh() when it changes): its job's
        seats take the highest share of their members (policy/gang.py). A client without one
        (the usual case) changes no job's share: nothing to tell, on the registration path."""
        if conn.quota.compute_share is not None:
            self.state.registry.set_share(conn, conn.quota.compute_share)

    # -- the sources ---------------------------------------------------------------------------
    def settings(self, conn: Conn, msg: Settings) -> None:
        """SETTINGS: the environment's values; LIMITS always answers it."""
        conn.quota_env = from_settings(msg)
        conn.quota_sent = None
        share = conn.quota_env.compute_share
        if share is not None and not may_raise_itself(self.state, conn):
            tenant = _tenant(conn)
            self.declared.setdefault(tenant, {})[conn] = share
            self._own_shares(tenant, conn)
            counted = conn.quota_env.compute_share
            if counted != share:
                self.state.client_log.info(
                    conn, "settings pid=%d uid=%d client=%d: compute share %g counts as %g: in "
                    "ratio to its user's (or pod's) other declared shares, the largest at the "
                    "default (only an admin may raise one above it)", conn.pid, conn.uid, conn.id,
                    share, counted)
        self.refresh(conn)

    def forget(self, conn: Conn) -> None:
        """A client is gone: its tenant's other declared shares count without it."""
        if not self.declared:  # the usual case: nobody declared a share
            return
        tenant = _tenant(conn)
        mine = self.declared.get(tenant)
        if mine is not None and mine.pop(conn, None) is not None:
            if mine:
                self._own_shares(tenant)
            else:
                del self.declared[tenant]

    def _own_shares(self, tenant: tuple, new: Conn | None = None) -> None:
        """The tenant's declared shares as they count now; those of its other clients that changed
        are carried out (`new` is refreshed by its caller)."""
        for conn, share in own_shares(self.declared[tenant]).items():
            if conn.quota_env.compute_share != share:
                conn.quota_env = replace(conn.quota_env, compute_share=share)
                if conn is not new:
                    self.refresh(conn)

    def set_clients(self, conns: list[Conn], name: str, value) -> None:
        when = next(self._when)
        for conn in conns:
            conn.quota_set[name] = (value, when)
            self.refresh(conn)

    def set_pod(self, namespace: str, name: str, field: str, value) -> list[Conn]:
        """nvsharectl for a pod: its clients now and later; returns those now."""
        self.by_pod.setdefault((namespace, name), {})[field] = (value, next(self._when))
        conns = [c for c in self.state.clients()
                 if c.pod is not None and (c.pod.namespace, c.pod.name) == (namespace, name)]
        for conn in conns:
            self.refresh(conn)
        return conns

    def pod_changed(self, key, settings) -> None:
        """The pod watch's report (pod_settings.PodKey, PodSettings): annotated fields that changed
        become the most recent setting; fields no longer annotated go."""
        old = self.annotations.get(key.uid, {})
        new = {}
        for name in NAMES:
            if name not in settings.annotated:
                continue
            value = getattr(settings, name)
            if name == "compute_limit" and value is not None:
                value = value / 100.0  # the annotation's percent
            new[name] = old[name] if name in old and old[name][0] == value else (value, next(self._when))
        self.annotations[key.uid] = new
        self._refresh_pod(key.uid)

    def set_claim(self, pod_uid: str, claim_uid: str, values: dict) -> list[Conn]:
        """A DRA claim's limits for a pod (field -> value; fields absent are not set by the claim).
        Sent again unchanged (the plugin re-sends after a restart of either side), a field keeps its
        place in the order. Returns the pod's clients now."""
        old = self.claims.get(pod_uid, {}).get(claim_uid, {})
        new = {name: old[name] if name in old and old[name][0] == value else (value, next(self._when))
               for name, value in values.items() if name in NAMES}
        self.claims.setdefault(pod_uid, {})[claim_uid] = new
        return self._refresh_pod(pod_uid)

    def clear_claim(self, claim_uid: str) -> int:
        """The claim was unprepared: its limits go from every pod it was set for."""
        pods = [uid for uid, claims in self.claims.items() if claims.pop(claim_uid, None) is not None]
        for uid in pods:
            if not self.claims[uid]:
                del self.claims[uid]
            self._refresh_pod(uid)
        return len(pods)

    def pod_removed(self, key) -> None:
        if self.annotations.pop(key.uid, None) is not None:
            self._refresh_pod(key.uid)

    def _refresh_pod(self, uid: str) -> list[Conn]:
        conns = [c for c in self.state.clients() if c.pod is not None and c.pod.uid == uid]
        for conn in conns:
            self.refresh(conn)
        return conns


def _pct(fraction: float | None) -> str:
    return "none" if fraction is None else f"{fraction * 100:g}%"
