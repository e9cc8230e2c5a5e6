"""Per-pod GPU settings from pod annotations: the interface the quotas use.

Three annotations on a pod set its GPU settings:

    nvshare.com/gpu-compute-limit   hard cap, percent of the GPU's time: a number from 0.1 to 100
                                    ("50", "12.5", "50%"), or "none" (no cap)
    nvshare.com/gpu-compute-share   weight against the other pods on the GPU: a number from 0.001
                                    to 1000000
    nvshare.com/gpu-memory-limit    a size as xpushare.wire.sizes reads it ("4GiB", "512MiB", bytes),
                                    from 1 byte to 2^64-1 bytes, or "none" (no limit)

The ranges are those of nvsharectl's flags and the control ops, from the same kinds
(scheduler/quota_ranges.py); the annotation's grammar is its own (no exponents, a trailing % on
the limit, "none" in any case).

An annotation overrides the environment variable the process was started with; "none" overrides it
too (no limit, whatever the environment says); an absent annotation leaves the environment's value
(PodSettings.effective). An invalid value is a Problem: the previous valid value stays, and the
watcher reports it once as a Warning Event on the pod (reason InvalidGpuAnnotation) and in the log.

This module is pure and standard library only, as is quota_ranges (the scheduler imports it and
must stay light):
parse_annotations(annotations, previous) -> (PodSettings, [Problem]), and PodKey, a pod as both the
API server and the scheduler's peer identity name it. pod_watch.PodSettingsWatcher lists and
watches the pods of a node and reports their settings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import List, Mapping, NamedTuple, Optional, Tuple

from ..wire import quota_ranges as ranges
from ..wire.ctlschema import Invalid
from ..wire.sizes import format_size, parse_size

__all__ = ["COMPUTE_LIMIT", "COMPUTE_SHARE", "MEMORY_LIMIT", "LATENCY_SENSITIVE", "ANNOTATIONS", "EVENT_REASON",
           "PodSettings", "Problem", "PodKey", "parse_annotations", "pod_key", "enabled_from_env"]

COMPUTE_LIMIT = "nvshare.com/gpu-compute-limit"
COMPUTE_SHARE = "nvshare.com/gpu-compute-share"
MEMORY_LIMIT = "nvshare.com/gpu-memory-limit"
LATENCY_SENSITIVE = "nvshare.com/latency-sensitive"
ANNOTATIONS = (COMPUTE_LIMIT, COMPUTE_SHARE, MEMORY_LIMIT, LATENCY_SENSITIVE)
EVENT_REASON = "InvalidGpuAnnotation"

# annotation -> PodSettings field
_FIELD = {COMPUTE_LIMIT: "compute_limit", COMPUTE_SHARE: "compute_share", MEMORY_LIMIT: "memory_limit",
          LATENCY_SENSITIVE: "latency_sensitive"}
_YES, _NO = ("true", "on", "yes", "1"), ("false", "off", "no", "0")
# annotation -> the kind its value must fit (the ranges of every way of setting a quota)
_KIND = {COMPUTE_LIMIT: ranges.COMPUTE_LIMIT, COMPUTE_SHARE: ranges.COMPUTE_SHARE,
         MEMORY_LIMIT: ranges.MEMORY_LIMIT}
_ACCEPTED = {
    COMPUTE_LIMIT: f"a percentage of GPU time {ranges.COMPUTE_LIMIT_SPAN} (e.g. 50, 12.5 or 50%), "
                   f"or {ranges.CLEAR}",
    COMPUTE_SHARE: f"a number (a weight) {ranges.COMPUTE_SHARE_SPAN} (e.g. 1, 2 or 0.5)",
    MEMORY_LIMIT: f"a size from {ranges.MEMORY_LIMIT.lo} to {ranges.MEMORY_LIMIT.hi} bytes (e.g. "
                  f"4GiB, 512MiB or a number of bytes), or {ranges.CLEAR}",
    LATENCY_SENSITIVE: '"true" or "false"',
}
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_MAX_SHOWN = 64  # characters of a bad value quoted in a message (an annotation can be 256 KiB)


# ---------------------------------------------------------------------------------------------
# parsing (pure)

@dataclass(frozen=True)
class PodSettings:
    """A pod's GPU settings from its annotations.

    compute_limit: percent of the GPU's time; compute_share: a weight; memory_limit: bytes (the
    ranges of quota_ranges). A field is None when its annotation is absent or says "none";
    ``annotated`` holds the names of the fields an annotation set, "none" included, so that
    effective() can tell "no limit" (overrides the environment) from "not set" (the environment's).
    """

    compute_limit: Optional[float] = None
    compute_share: Optional[float] = None
    memory_limit: Optional[int] = None
    annotated: frozenset = field(default_factory=frozenset)
    latency_sensitive: Optional[bool] = None  # nvshare.com/latency-sensitive, "true" or "false"

    def effective(self, name: str, env_value):
        """The value to use for field `name`: the annotation's when the pod has one (None for
        "none"), else `env_value`, the one the process was started with."""
        if name not in _FIELD.values():
            raise KeyError(name)
        return getattr(self, name) if name in self.annotated else env_value

    def __str__(self) -> str:
        parts = []
        for ann, name in _FIELD.items():
            if name in self.annotated:
                value = getattr(self, name)
                if value is None:
                    text = "none"
                elif name == "memory_limit":
                    text = format_size(value)
                elif name == "latency_sensitive":
                    text = "true" if value else "false"
                else:
                    text = f"{value:g}" + ("%" if name == "compute_limit" else "")
                parts.append(f"{ann.split('/', 1)[1]}={text}")
        return ", ".join(parts) or "no GPU annotations"


class Problem(NamedTuple):
    """One annotation whose value is not accepted."""

    annotation: str
    value: str
    message: str     # names the annotation, the value and what is accepted


def _shown(value: str) -> str:
    return value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "..."


def _read(annotation: str, text: str):
    """The number or size an annotation's text stands for, before its range is checked; None when
    the text is none of those."""
    if annotation == MEMORY_LIMIT:
        try:
            return parse_size(text)
        except ValueError:
            return None
    if annotation == COMPUTE_LIMIT and text.endswith("%"):
        text = text[:-1].rstrip()
    return float(text) if _NUMBER.match(text) else None


def _parse_one(annotation: str, raw: str):
    """(value, ok) for one annotation's text; value None for "none"."""
    text = raw.strip()
    if annotation == LATENCY_SENSITIVE:
        word = text.lower()
        return (word in _YES), word in _YES + _NO
    kind = _KIND[annotation]
    if text.lower() in kind.words:
        return None, True  # "none": no limit
    try:
        return kind.check(annotation, _read(annotation, text)), True
    except Invalid:
        return None, False


def parse_annotations(annotations: Optional[Mapping[str, str]],
                      previous: Optional[PodSettings] = None) -> Tuple[PodSettings, List[Problem]]:
    """A pod's settings from its annotations, and the annotations that were not accepted.

    An absent annotation clears its field (the environment's value applies again). An invalid one
    keeps the field as it was in `previous` (nothing set when there is no previous) and is listed
    as a Problem. Other annotations are ignored."""
    annotations = annotations or {}
    previous = previous or PodSettings()
    values = {}
    annotated = set()
    problems = []
    for ann, name in _FIELD.items():
        if ann not in annotations:
            values[name] = None
            continue
        raw = annotations[ann]
        raw = "" if raw is None else str(raw)
        value, ok = _parse_one(ann, raw)
        if ok:
            values[name] = value
            annotated.add(name)
            continue
        values[name] = getattr(previous, name)
        if name in previous.annotated:
            annotated.add(name)
        kept = ("keeping the previous value" if name in previous.annotated
                else "the annotation is ignored")
        problems.append(Problem(ann, raw, f"invalid value {_shown(raw)!r} for annotation {ann}: "
                                          f"expected {_ACCEPTED[ann]}; {kept}"))
    return PodSettings(annotated=frozenset(annotated), **values), problems


# ---------------------------------------------------------------------------------------------
# pod identity as the scheduler sees it

class PodKey(NamedTuple):
    """A pod as both the API server and the scheduler's peer identity name it.

    uid is the UID found in the pod's cgroup path (xpushare.kubernetes.podidentity.PodIdentity.uid,
    Conn.pod.uid in the scheduler): metadata.uid for API pods; for a static pod's mirror pod, the
    kubelet's config hash (annotation kubernetes.io/config.mirror), which is the static pod's UID on
    the node. namespace/name match PodIdentity.namespace/name when the scheduler found those."""

    uid: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_key(pod: Mapping) -> Optional[PodKey]:
    """The PodKey of a pod object (a dict as the API server sends it), or None without a UID."""
    meta = pod.get("metadata") or {}
    uid = (meta.get("annotations") or {}).get(MIRROR_ANNOTATION) or meta.get("uid")
    if not uid:
        return None
    return PodKey(str(uid), meta.get("namespace") or "", meta.get("name") or "")


def enabled_from_env(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the scheduler should watch pod annotations: NVSHARE_POD_ANNOTATIONS is on (the chart
    sets it, with NODE_NAME from the downward API, under scheduler.gpuAnnotations.enabled)."""
    environ = os.environ if environ is None else environ
    return environ.get("NVSHARE_POD_ANNOTATIONS", "").strip().lower() in ("1", "on", "true", "yes")
