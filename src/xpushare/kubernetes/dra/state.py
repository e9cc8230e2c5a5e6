"""Prepared claims on disk: ``<state-dir>/prepared.json``, rewritten atomically (cdi.write_atomic)
after every change. A restarted plugin reads it back, so a repeated NodePrepareResources answers
with the same devices without asking the API server, NodeUnprepareResources of a claim prepared
before the restart removes its spec, and the scheduler is told the claims' limits again."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Dict, Optional

from .cdi import write_atomic
from .claims import ClaimPlan, Grant, Limits

log = logging.getLogger("nvshare-dra-plugin")

FILE_NAME = "prepared.json"
VERSION = 1


def to_record(plan: ClaimPlan) -> dict:
    return {"namespace": plan.namespace, "name": plan.name, "pool": plan.pool, "pods": list(plan.pods),
            "grants": [{"request": g.request, "device": g.device, "gpu": g.gpu_uuid} for g in plan.grants],
            "limits": plan.limits.as_dict()}


def from_record(uid: str, rec: dict) -> ClaimPlan:
    lim = rec.get("limits") or {}
    return ClaimPlan(uid=uid, namespace=rec["namespace"], name=rec["name"], pool=rec["pool"],
                     grants=tuple(Grant(g["request"], g["device"], g["gpu"]) for g in rec["grants"]),
                     limits=Limits(lim.get("memory"), lim.get("compute"), lim.get("share")),
                     pods=tuple(rec.get("pods") or ()))


class PreparedClaims:
    """uid -> ClaimPlan, mirrored to disk. Callers hold `lock` around read-modify-write sequences."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, FILE_NAME)
        self.lock = threading.RLock()
        self.claims: Dict[str, ClaimPlan] = {}
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            # A corrupt file cannot come from our own writes (rename is atomic); keep it for a human.
            raise RuntimeError(f"cannot read {self.path}: {e}") from e
        for uid, rec in (data.get("claims") or {}).items():
            self.claims[uid] = from_record(uid, rec)
        log.info("%d prepared claims from %s", len(self.claims), self.path)

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
