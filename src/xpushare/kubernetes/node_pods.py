"""What the scheduler is told of its node's pods (scheduler/__main__.py hands it to the server): who
a connection's process is (pod_lookup.PodLookup) and a watch of the pods' GPU annotations
(pod_watch.PodSettingsWatcher, when NVSHARE_POD_ANNOTATIONS is on). The scheduler itself imports
nothing of xpushare.kubernetes."""

from __future__ import annotations

import logging
import os

from .pod_lookup import PodLookup
from .pod_settings import enabled_from_env
from .pod_watch import PodSettingsWatcher

log = logging.getLogger("nvshare.scheduler.pods")


def node_pods():
    """(the pod lookup, the function that starts the annotation watch)."""
    return PodLookup(), watch_from_env


def watch_from_env(on_changed, on_removed, loop):
    """The scheduler's watch of its node's pods' GPU annotations (quotas.py), when
    NVSHARE_POD_ANNOTATIONS is on (the chart sets it): in a thread of its own, reported on the loop.
    Without the kubernetes client, credentials or NODE_NAME the scheduler serves on without them
    (one warning). The API server is the in-cluster one, or the one of the kubeconfig file
    NVSHARE_KUBECONFIG names (a scheduler run outside a pod, and the end-to-end tests' fake one)."""
    if not enabled_from_env():
        return None
    try:
        return PodSettingsWatcher(on_changed=on_changed, on_removed=on_removed, loop=loop,
                                  kubeconfig=os.environ.get("NVSHARE_KUBECONFIG") or None).start()
    except Exception as e:  # ImportError (no client), ConfigException, no NODE_NAME
        log.warning("pod annotations (nvshare.com/gpu-*) are not read: %s", e)
        return None
