"""Reading the scheduler's log in the benchmarks: its durations, and the drops, releases and grants of
the benchmark's processes (harness.Event: t, kind, pid, fields) with the times the clients measured."""

from __future__ import annotations

import re
from collections.abc import Iterable

from bench.core.stats import median


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


DURATION_RE = re.compile(r"^(-?[0-9]+(?:\.[0-9]*)?(?:e-?[0-9]+)?)(us|ms|s)$")


def duration_s(text: str | None) -> float | None:
    """"12.3ms" / "1.23s" / "170us" (the scheduler log's units) -> seconds; None if not a duration."""
    if not text:
        return None
    m = DURATION_RE.match(text)
    if m is None:
        return None
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def events_of(events: Iterable, kind: str, pids: Iterable[int], t0: float, t1: float) -> list:
    """Scheduler log events (harness.Event: t, kind, pid, fields) of a kind, for pids, within [t0, t1]."""
    wanted = set(pids)
    return [e for e in events if e.kind == kind and e.pid in wanted and t0 <= e.t <= t1]


def switches(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    """Each drop of one of `pids` within [t0, t1], with the release that answered it: the handoff time
    seen by the scheduler (drop -> release) and what the client measured (drain, evict, and the
    prefetch at the grant it released)."""
    evs = sorted(events, key=lambda e: e.t)
    found = []
    for drop in events_of(evs, "drop", pids, t0, t1):
        release = next((e for e in evs if e.kind == "release" and e.pid == drop.pid and e.t >= drop.t), None)
        found.append({
            "pid": drop.pid, "t_drop": drop.t, "reason": drop.fields.get("reason"),
            "evict": drop.fields.get("evict") == "yes",
            "t_release": None if release is None else release.t,
            "handoff_ms": None if release is None else (release.t - drop.t) * 1e3,
            **{f"{k}_ms": ms(duration_s(release.fields.get(k))) if release else None
               for k in ("drain", "evict", "prefetch")},
        })
    return found


def releases(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    """Release lines of pids within [t0, t1] with their reason and measured times (ms)."""
    return [{"pid": e.pid, "t": e.t, "reason": e.fields.get("reason"),
             **{f"{k}_ms": ms(duration_s(e.fields.get(k))) for k in ("held", "drain", "evict", "prefetch")}}
            for e in events_of(events, "release", pids, t0, t1)]


def grants(events: Iterable, pids: Iterable[int], t0: float, t1: float) -> list[dict]:
    return [{"pid": e.pid, "t": e.t, "prefetch": e.fields.get("prefetch") == "yes"}
            for e in events_of(events, "grant", pids, t0, t1)]


def switch_totals(found: list[dict], rels: list[dict]) -> dict:
    """Medians over a round's switches: handoff (drop -> release), the client's drain and evict, and
    the bulk prefetches reported by releases (0 = none was done)."""
    prefetches = [r["prefetch_ms"] for r in rels if r.get("prefetch_ms")]
    return {
        "count": len(found),
        "evicting": sum(1 for s in found if s["evict"]),
        "reasons": sorted({s["reason"] for s in found if s["reason"]}),
        "handoff_ms": median(s["handoff_ms"] for s in found if s["handoff_ms"] is not None),
        "drain_ms": median(s["drain_ms"] for s in found if s["drain_ms"] is not None),
        "evict_ms": median(s["evict_ms"] for s in found if s["evict_ms"] is not None),
        "prefetch_ms": median(prefetches),
        "prefetches": len(prefetches),
    }
