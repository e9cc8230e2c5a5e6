"""The CDI (Container Device Interface) spec of a prepared claim: what the container runtime injects
into the claim's containers. The same as nvshare-device-plugin's Allocate gives (docs/kubernetes.md):
the library preloaded from the read-only host directory, the scheduler's socket, the GPUs by UUID
for the NVIDIA container runtime; plus the claim's limits, which libnvshare.so enforces from its
start (the scheduler learns them too, from the plugin, and may change them live):

    NVSHARE_GPU_MEMORY_LIMIT   bytes per GPU
    NVSHARE_COMPUTE_LIMIT      percent of the GPU's time (absent: a whole GPU's compute)
    NVSHARE_COMPUTE_SHARE      the claim's weight (absent: the default)

One spec file per claim, ``<cdi-dir>/gpu.nvshare.com-claim_<uid>.json``, with one device named
after the claim's UID: its ID is ``gpu.nvshare.com/claim=<uid>``. Files are written to a temporary
name in the same directory and renamed, so a runtime never reads half a spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List

from ...wire.ctlschema import Uid
from ..libinstall import LIBRARY_NAME
from .claims import ClaimPlan

CDI_VERSION = "0.6.0"
CDI_KIND = "gpu.nvshare.com/claim"
SCHEDULER_SOCKET_NAME = "scheduler.sock"
_MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]


@dataclass(frozen=True)
class Injection:
    """The node's paths (the admin's flags, as nvshare-device-plugin's)."""
    host_lib_dir: str = "/var/lib/nvshare/lib"
    container_lib_dir: str = "/usr/local/nvshare/lib"
    host_socket_dir: str = "/var/run/nvshare"
    container_socket_dir: str = "/var/run/nvshare"
    extra_env: Dict[str, str] = field(default_factory=dict)


def device_id(claim_uid: str) -> str:
    return f"{CDI_KIND}={claim_uid}"


def spec_path(cdi_dir: str, claim_uid: str) -> str:
    """The claim's spec file, always directly in `cdi_dir`: ValueError for a UID that is not one
    (claims.check_ref refuses it earlier, with the kubelet's words)."""
    name = f"gpu.nvshare.com-claim_{claim_uid}.json"
    if Uid.TEXT.fullmatch(claim_uid or "") is None or os.path.basename(name) != name:
        raise ValueError(f"not a claim UID: {claim_uid!r}")
    return os.path.join(cdi_dir, name)


def environment(plan: ClaimPlan, how: Injection) -> Dict[str, str]:
    env = dict(how.extra_env)
    env["LD_PRELOAD"] = f"{how.container_lib_dir.rstrip('/')}/{LIBRARY_NAME}"
    env["NVSHARE_SOCK_PATH"] = f"{how.container_socket_dir.rstrip('/')}/{SCHEDULER_SOCKET_NAME}"
    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(plan.gpu_uuids)
    limits = plan.limits
    if limits.memory is not None:
        env["NVSHARE_GPU_MEMORY_LIMIT"] = str(limits.memory)
    if limits.compute is not None:
        env["NVSHARE_COMPUTE_LIMIT"] = f"{limits.compute:g}"
    if limits.share is not None:
        env["NVSHARE_COMPUTE_SHARE"] = f"{limits.share:g}"
    return env


def spec(plan: ClaimPlan, how: Injection) -> dict:
    env = environment(plan, how)
    mounts: List[dict] = [
        {"hostPath": how.host_lib_dir, "containerPath": how.container_lib_dir, "options": _MOUNT_OPTIONS},
        {"hostPath": how.host_socket_dir, "containerPath": how.container_socket_dir,
         "options": _MOUNT_OPTIONS},
    ]
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND,
            "devices": [{"name": plan.uid, "containerEdits": {
                "env": [f"{k}={v}" for k, v in sorted(env.items())], "mounts": mounts}}]}


def write_atomic(path: str, data: dict) -> None:
    """Write JSON to `path` by a temporary file in its directory and a rename (fsync'd)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write(cdi_dir: str, plan: ClaimPlan, how: Injection) -> str:
    path = spec_path(cdi_dir, plan.uid)
    write_atomic(path, spec(plan, how))
    return path


def remove(cdi_dir: str, claim_uid: str) -> bool:
    try:
        os.unlink(spec_path(cdi_dir, claim_uid))
        return True
    except FileNotFoundError:
        return False
