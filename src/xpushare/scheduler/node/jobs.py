"""Which job a client belongs to (policy/gang.py grants a job's GPUs together).

From what the kernel and the client's environment say, first match wins:
1. an explicit NVSHARE_JOB name (JOB message, kind 1): one job per name and uid, so that nobody
   joins another user's job (a member can hold the job's GPUs back);
2. a torch distributed run (JOB message, kind 2: TORCHELASTIC_RUN_ID, MASTER_ADDR:MASTER_PORT,
   LOCAL_WORLD_SIZE): one job per run id, rendezvous and uid; its size is the local world size
   (the ranks on this node), so it waits for them all before it runs;
3. the pod the process runs in (from its cgroup, kubernetes.pod_lookup.PodLookup): one job per pod;
4. else the process alone (a process that drives several GPUs is a job by itself).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from ...wire.protocol import JOB_EXPLICIT, JOB_TORCH


class Identity(NamedTuple):
    key: Hashable
    kind: str          # "name", "torchrun", "pod" or "process"
    label: str         # for status, top, metrics and the log
    size: int | None   # members to wait for; None: not known


def identify(conn) -> Identity:
    info = getattr(conn, "job_info", None)
    if info is not None and info.kind == JOB_EXPLICIT and info.name:
        return Identity(("name", conn.uid, info.name), "name", info.name, _size(info))
    if info is not None and info.kind == JOB_TORCH:
        run = info.name or info.rendezvous or "?"
        return Identity(("torchrun", conn.uid, info.name, info.rendezvous), "torchrun",
                        f"torchrun {run}", _size(info))
    pod = conn.pod
    if pod is not None and getattr(pod, "name", None):
        name = f"{pod.namespace}/{pod.name}"
        return Identity(("pod", pod.namespace, pod.name), "pod", name, None)
    return Identity(("process", conn.id), "process", f"pid {conn.pid}", None)


def _size(info) -> int | None:
    size = info.local_world_size or info.world_size
    return size if size and size > 1 else None
