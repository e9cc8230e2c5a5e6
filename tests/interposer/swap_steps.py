"""What the swap tests share (test_swap_store.py, test_swap_vmm.py, test_alloc_vmm.py,
test_swap_cold.py): whose driver calls a log entry is, the pieces of host copies the library pinned
and let go, a drop with EVICT through the fake scheduler, the RESIDENCY reports."""

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


def drop(recorder, n: int, device: int = 0, evict_mib: int = 0) -> None:
    """The n-th lock request on `device`, then a DROP_LOCK with EVICT (asking evict_mib of room; 0:
    everything), then its release."""
    recorder.wait_count(MessageType.REQ_LOCK, n, device=device)
    recorder.drop(device, flags=DROP_EVICT, evict_mib=evict_mib)
    recorder.wait_count(MessageType.LOCK_RELEASED, n, device=device)


def residency(recorder) -> list:
    return [r.msg for r in recorder.messages(MessageType.RESIDENCY)]


PIN_CALLS = ("cuMemHostRegister", "cuMemHostAlloc")  # NVSHARE_SWAP_PIN=register, its fallback
UNPIN_CALLS = ("cuMemHostUnregister", "cuMemFreeHost")


def pins(log, app, ok: bool = True) -> list[dict]:
    """The pieces of host copies the library pinned itself (ok: only those the driver accepted),
    in the order the calls began."""
    found = [e for fn in PIN_CALLS for e in ours(log, app, fn) if not ok or e["ret"] == 0]
    return sorted(found, key=lambda e: e["t0"])


def unpins(log, app) -> list[dict]:
    """Every successful release of pinned host memory in the process (any thread)."""
    found = [e for fn in UNPIN_CALLS for e in log.entries(app.pid, fn) if e["ret"] == 0]
    return sorted(found, key=lambda e: e["t0"])
