"""Prepared claims on disk: ``<state-dir>/prepared.json``, rewritten atomically (cdi.write_atomic)
after every change. A restarted plugin reads it back, so a repeated NodePrepareResources answers
with the same devices without asking the API server, NodeUnprepareResources of a claim prepared
before the restart removes its spec, and the scheduler is told the claims' limits again.

A damaged file (a disk error, a hand edit) does not keep the plugin from starting: the records that
can be read are kept, the file is set aside as ``prepared.json.damaged-<time>`` for a human, the
error is logged, and a good file is written with what was kept. A claim whose record was lost is
prepared again from the API server when the kubelet asks, and its spec is still removed by UID.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Dict, Optional, Tuple

from .cdi import write_atomic
from .claims import ClaimError, ClaimPlan, Grant, Limits, check_uid

log = logging.getLogger("nvshare-dra-plugin")

FILE_NAME = "prepared.json"
VERSION = 1


def to_record(plan: ClaimPlan) -> dict:
    return {"namespace": plan.namespace, "name": plan.name, "pool": plan.pool, "pods": list(plan.pods),
            "grants": [{"request": g.request, "device": g.device, "gpu": g.gpu_uuid, "share_id": g.share_id}
                       for g in plan.grants],
            "limits": plan.limits.as_dict()}


def _text(value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _number(value, kind):
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise ValueError(f"{value!r} is not a number")
    return value


def from_record(uid: str, rec: dict) -> ClaimPlan:
    """ValueError (or KeyError, TypeError) for a record our writes would not have made."""
    try:
        check_uid(uid)
    except ClaimError as e:
        raise ValueError(str(e)) from None
    lim = rec.get("limits") or {}
    return ClaimPlan(uid=uid, namespace=_text(rec["namespace"]), name=_text(rec["name"]),
                     pool=_text(rec["pool"]),
                     grants=tuple(Grant(_text(g["request"]), _text(g["device"]), _text(g["gpu"]),
                                        None if g.get("share_id") is None else _text(g["share_id"]))
                                  for g in rec["grants"]),
                     limits=Limits(_number(lim.get("memory"), int), _number(lim.get("compute"), (int, float)),
                                   _number(lim.get("share"), (int, float)),
                                   lim.get("latency_sensitive") if isinstance(lim.get("latency_sensitive"), bool)
                                   else None),
                     pods=tuple(_text(p) for p in rec.get("pods") or ()))


def read_records(text: str) -> Tuple[Dict[str, ClaimPlan], list]:
    """The claims a state file's text holds, and what was wrong with it (empty: nothing)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return {}, [f"not JSON ({e})"]
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, dict):
        return {}, ["no claims object"]
    kept, problems = {}, []
    for uid, rec in claims.items():
        try:
            kept[uid] = from_record(uid, rec)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            problems.append(f"claim {uid!r}: {type(e).__name__}: {e}")
    return kept, problems


class PreparedClaims:
    """uid -> ClaimPlan, mirrored to disk. Callers hold `lock` around read-modify-write sequences."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, FILE_NAME)
        self.lock = threading.RLock()
        self.claims: Dict[str, ClaimPlan] = {}
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return
        except OSError as e:
            text, problems = "", [f"unreadable ({e})"]
            claims = {}
        else:
            claims, problems = read_records(text)
        self.claims = claims
        if problems:
            self._set_aside(problems)
        log.info("%d prepared claims from %s", len(self.claims), self.path)

    def _set_aside(self, problems: list) -> None:
        """Keep the damaged file for a human, and write what was kept (a file our writes make)."""
        aside = f"{self.path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
        try:
            os.replace(self.path, aside)
        except OSError as e:
            aside = f"(not set aside: {e})"
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        log.error("%s is damaged: %s. Kept %d prepared claims; the file is now %s", self.path,
                  shown, len(self.claims), aside)
        try:
            self._save(self.claims)
        except OSError as e:
            log.error("cannot write %s again: %s", self.path, e)

    def get(self, uid: str) -> Optional[ClaimPlan]:
        return self.claims.get(uid)

    def _save(self, claims: Dict[str, ClaimPlan]) -> None:
        write_atomic(self.path, {"version": VERSION,
                                 "claims": {uid: to_record(p) for uid, p in sorted(claims.items())}})

    def put(self, plan: ClaimPlan) -> None:
        """Record a prepared claim; on a write error nothing changes, in memory or on disk."""
        claims = dict(self.claims, **{plan.uid: plan})
        self._save(claims)
        self.claims = claims

    def drop(self, uid: str) -> bool:
        if uid not in self.claims:
            return False
        claims = {k: v for k, v in self.claims.items() if k != uid}
        self._save(claims)
        self.claims = claims
        return True
