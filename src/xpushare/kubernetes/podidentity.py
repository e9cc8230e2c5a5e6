"""Which Kubernetes pod a host process belongs to, from the kernel's view of it.

The scheduler learns a client's pid from SO_PEERCRED (a host pid: its DaemonSet runs with
``hostPID: true``). This module turns that pid into a pod identity without trusting anything the
client says:

    pid -> /proc/<pid>/cgroup -> pod UID (+ container ID) -> /var/log/pods/<ns>_<name>_<uid>/

Standard library only: the scheduler imports it and must stay light.

Supported cgroup path shapes (cgroup v1 and v2; each v1 hierarchy line is tried, then the v2
``0::`` line):

  cgroupfs driver (kubelet --cgroup-driver=cgroupfs)
    /kubepods/pod<uid>/<cid>                                   Guaranteed QoS
    /kubepods/burstable/pod<uid>/<cid>                         Burstable
    /kubepods/besteffort/pod<uid>/<cid>                        BestEffort
    <cid> is the bare 64-hex ID (containerd, docker) or crio-<cid> (CRI-O)

  systemd driver (kubelet --cgroup-driver=systemd); the pod UID's dashes become underscores
    /kubepods.slice/kubepods-pod<uid_>.slice/<scope>
    /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/<scope>
    /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/<scope>
    <scope> is cri-containerd-<cid>.scope (containerd), crio-<cid>.scope (CRI-O),
    docker-<cid>.scope (docker / cri-dockerd); CRI-O's crio-conmon-<cid>.scope is the
    container monitor, not the container (container_id is then None).

Prefixes before the kubepods part (a kubelet --cgroup-root, a kind node's
/kubelet.slice/kubelet-kubepods.slice/..., or the "/../.." a reader in a private cgroup namespace
sees) and sub-cgroups below the container (e.g. CRI-O's .../crio-<cid>.scope/container) are
tolerated: the pod is found by the shape of its own path segment.

The pod UID is a UUID (API pods) or a 32-hex config hash (static pods). Namespace and name come from
the kubelet's log directory names, /var/log/pods/<namespace>_<name>_<uid>, which the scheduler's
DaemonSet mounts read-only. Namespaces and pod names are DNS names and cannot hold "_", so the split
is unambiguous. Without that directory, namespace and name are None and the UID is still reported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import NamedTuple, Optional

__all__ = ["PodIdentity", "CgroupPodRef", "pod_identity", "parse_cgroup_file", "parse_cgroup_path",
           "pod_names_from_logs"]

DEFAULT_PROC_ROOT = "/proc"
DEFAULT_POD_LOG_ROOT = "/var/log/pods"


@dataclass(frozen=True)
class PodIdentity:
    """A pod as the kernel and the kubelet see it.

    uid: the pod UID with dashes (as in ``metadata.uid``; a 32-hex hash for static pods).
    namespace, name: from /var/log/pods; None when that directory is not found.
    container_id: the 64-hex container ID (no ``containerd://`` prefix), None when the process is
    not in a container's cgroup (e.g. CRI-O's conmon).
    """

    uid: str
    namespace: Optional[str]
    name: Optional[str]
    container_id: Optional[str]

    def __str__(self) -> str:  # e.g. "default/trainer-0" or the UID when names are unknown
        if self.namespace and self.name:
            return f"{self.namespace}/{self.name}"
        return f"pod {self.uid}"


class CgroupPodRef(NamedTuple):
    """What one cgroup path says: the pod, its QoS class, the container and its runtime."""

    pod_uid: str                 # with dashes
    qos: str                     # "guaranteed", "burstable" or "besteffort"
    container_id: Optional[str]  # 64 hex, or None
    runtime: Optional[str]       # "containerd", "cri-o", "docker", or None when the shape does not say
    driver: str                  # "systemd" or "cgroupfs"


_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_HASH = r"[0-9a-f]{32}"
_POD_UID = rf"(?P<uid>{_UUID}|{_HASH})"

# systemd: "kubepods-burstable-pod<uid_>.slice", "kubepods-pod<uid_>.slice",
# "kubelet-kubepods-besteffort-pod<uid_>.slice"
_SYSTEMD_POD = re.compile(rf"^(?:[a-z0-9_.]+-)*kubepods(?:-(?P<qos>burstable|besteffort))?-pod{_POD_UID}\.slice$")
# cgroupfs: "pod<uid>" below ".../kubepods[/burstable|/besteffort]"
_CGROUPFS_POD = re.compile(rf"^pod{_POD_UID}$")

_CID = r"(?P<cid>[0-9a-f]{64})"
_SYSTEMD_CONTAINER = [
    (re.compile(rf"^cri-containerd-{_CID}\.scope$"), "containerd"),
    (re.compile(rf"^crio-{_CID}\.scope$"), "cri-o"),
    (re.compile(rf"^docker-{_CID}\.scope$"), "docker"),
]
_CGROUPFS_CONTAINER = [
    (re.compile(rf"^crio-{_CID}$"), "cri-o"),
    (re.compile(rf"^{_CID}$"), None),  # containerd and docker look alike here
]
_CONMON = re.compile(rf"^crio-conmon-{_CID}(?:\.scope)?$")


def _normalize_uid(raw: str) -> str:
    return raw.replace("_", "-")


def parse_cgroup_path(path: str) -> Optional[CgroupPodRef]:
    """Recognise a pod in one cgroup path (the part after the second ':' of a /proc/pid/cgroup line)."""
    segments = [s for s in path.strip().split("/") if s]
    for i, seg in enumerate(segments):
        m = _SYSTEMD_POD.match(seg)
        if m:
            uid = _normalize_uid(m.group("uid"))
            qos = m.group("qos") or "guaranteed"
            cid, runtime = _container_below(segments[i + 1:], _SYSTEMD_CONTAINER)
            return CgroupPodRef(uid, qos, cid, runtime, "systemd")
        m = _CGROUPFS_POD.match(seg)
        if m and i > 0:
            parent = segments[i - 1]
            if parent in ("burstable", "besteffort"):
                qos = parent
                if i < 2 or not segments[i - 2].endswith("kubepods"):
                    continue
            elif parent.endswith("kubepods"):
                qos = "guaranteed"
            else:
                continue
            uid = _normalize_uid(m.group("uid"))
            cid, runtime = _container_below(segments[i + 1:], _CGROUPFS_CONTAINER)
            return CgroupPodRef(uid, qos, cid, runtime, "cgroupfs")
    return None


def _container_below(rest, patterns):
    """The container segment directly below the pod segment (sub-cgroups below it are fine)."""
    if not rest:
        return None, None
    seg = rest[0]
    if _CONMON.match(seg):
        return None, None
    for pattern, runtime in patterns:
        m = pattern.match(seg)
        if m:
            return m.group("cid"), runtime
    return None, None


def parse_cgroup_file(text: str) -> Optional[CgroupPodRef]:
    """Recognise a pod in the contents of /proc/<pid>/cgroup (v1, v2 or hybrid).

    Lines look like "hierarchy-id:controllers:path"; the path may itself contain ':'.
    The first line whose path names a pod wins; a line naming a container beats one that only
    names the pod (v1 hierarchies can disagree while a process is being moved).
    """
    if "kubepods" not in text:  # every pod's cgroup path names it; most processes are in none
        return None
    best = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ref = parse_cgroup_path(parts[2])
        if ref is None:
            continue
        if ref.container_id is not None:
            return ref
        if best is None:
            best = ref
    return best


def pod_names_from_logs(uid: str, pod_log_root: str = DEFAULT_POD_LOG_ROOT):
    """(namespace, name) for a pod UID from /var/log/pods/<namespace>_<name>_<uid>, or (None, None)."""
    suffix = "_" + uid
    try:
        with os.scandir(pod_log_root) as it:
            for entry in it:
                if not entry.name.endswith(suffix):
                    continue
                parts = entry.name.split("_")
                if len(parts) == 3 and parts[0] and parts[1] and parts[2] == uid:
                    return parts[0], parts[1]
    except OSError:
        pass
    return None, None


def pod_identity(pid: int, proc_root: str = DEFAULT_PROC_ROOT,
                 pod_log_root: str = DEFAULT_POD_LOG_ROOT) -> Optional[PodIdentity]:
    """The pod that host process `pid` runs in, or None (not in a pod, gone, or unreadable)."""
    try:
        with open(os.path.join(proc_root, str(int(pid)), "cgroup"), encoding="utf-8",
                  errors="replace") as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    ref = parse_cgroup_file(text)
    if ref is None:
        return None
    namespace, name = pod_names_from_logs(ref.pod_uid, pod_log_root)
    return PodIdentity(uid=ref.pod_uid, namespace=namespace, name=name, container_id=ref.container_id)
