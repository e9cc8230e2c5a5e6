"""Who a scheduler connection's process is, on a Kubernetes node: its pod, from its cgroup and the
kubelet's pod log directories (podidentity.py). The scheduler is handed a PodLookup by its entry
point (scheduler/__main__.py) and knows nothing of Kubernetes itself."""

from __future__ import annotations

import logging
import os

from . import podidentity

log = logging.getLogger("nvshare.scheduler")

# Test seam: a directory standing in for / when pod identities are read (<root>/proc/<pid>/cgroup,
# <root>/var/log/pods), so that an end-to-end test can give a local process a pod without a pod
# cgroup. It is the scheduler's own environment, which only whoever starts the scheduler sets: a
# client still cannot choose its identity. Deployments never set it (startup warns when it is set).
POD_IDENTITY_ROOT_ENV = "NVSHARE_POD_IDENTITY_ROOT"


class PodLookup:
    """pid -> pod identity (podidentity.py), when the host keeps pods' logs (a Kubernetes node), or
    the test seam names a root. The scheduler's entry point hands it to the scheduler.
    Called once per connection, when it is made (Conn.pod); never cached by pid, which the kernel
    reuses."""

    def __init__(self, environ=None):
        self._fn = None
        self._loaded = False
        self._own: tuple = ()   # (the scheduler's own pod,) once looked up
        self.root = (os.environ if environ is None else environ).get(POD_IDENTITY_ROOT_ENV) or None
        if self.root is not None:
            log.warning("pod identities are read below %s (%s), not from /proc and /var/log/pods: "
                        "a test setting", self.root, POD_IDENTITY_ROOT_ENV)

    def __call__(self, pid: int):
        if not self._loaded:
            self._loaded = True
            self._fn = podidentity.pod_identity
            # A pod's name comes from the kubelet's pod log directories (the chart mounts them): on
            # a host without them there are no pods to find, and no connection's cgroup is read
            # (docs/benchmarks.md, "burst registration").
            if self.root is None and not os.path.isdir(podidentity.DEFAULT_POD_LOG_ROOT):
                self._fn = None
                log.info("pod identities: off (no %s on this host)", podidentity.DEFAULT_POD_LOG_ROOT)
            if self.root is not None:
                root = self.root
                self._fn = lambda pid: podidentity.pod_identity(
                    pid, proc_root=os.path.join(root, "proc"),
                    pod_log_root=os.path.join(root, "var", "log", "pods"))
        if self._fn is None or pid <= 0:
            return None
        try:
            return self._fn(pid)
        except Exception as e:  # never let a lookup take the daemon down
            log.debug("pod identity of pid %d failed: %s", pid, e)
            return None

    def own(self):
        """The scheduler's own pod (None outside one): looked up once, it does not change."""
        if not self._own:
            self._own = (self(os.getpid()),)
        return self._own[0]
