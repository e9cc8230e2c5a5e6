"""What the swap tests share (test_swap_store.py, test_swap_vmm.py, test_alloc_vmm.py): whose
driver calls a log entry is, a drop with EVICT through the fake scheduler, the RESIDENCY reports."""

from __future__ import annotations

from xpushare.wire.protocol import DROP_EVICT, MessageType


def idle_env(**extra) -> dict:
    """An app that never gives the lock back by itself: only the test's drops move its memory."""
    return {"NVSHARE_IDLE_RELEASE_MS": 0, **extra}


def _app_tids(app) -> set[int]:
    return {ln["tid"] for ln in app.lines}


def ours(log, app, fn) -> list[dict]:
    """Calls of fn the library made itself (not on an application thread)."""
    tids = _app_tids(app)
    return [e for e in log.entries(app.pid, fn) if e["tid"] not in tids]


def theirs(log, app, fn) -> list[dict]:
    """Calls of fn made on the application's threads."""
    tids = _app_tids(app)
    return [e for e in log.entries(app.pid, fn) if e["tid"] in tids]


def drop(recorder, n: int) -> None:
    """The n-th lock request, then a DROP_LOCK with EVICT, then its release."""
    recorder.wait_count(MessageType.REQ_LOCK, n, device=0)
    recorder.drop(0, flags=DROP_EVICT)
    recorder.wait_count(MessageType.LOCK_RELEASED, n, device=0)


def residency(recorder) -> list:
    return [r.msg for r in recorder.messages(MessageType.RESIDENCY)]
