"""The footprint a client reports (MEM_UPDATE, docs/protocol.md): sent before every REQ_LOCK with
the device's current managed and other bytes, coalesced to at most one per device per 100 ms when
it changes, and visible per GPU in `nvsharectl status --json`.

A small in-process scheduler (fake_scheduler.RecordingScheduler, the `recorder` fixture) speaks the
protocol with the real libnvshare.so and records every frame the library sends, in order, so a test
can check what came before what.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from xpushare.wire.protocol import MessageType

from .fake_scheduler import RecordingScheduler
from .harness import MIB, SRC, clean_env, poll, uuid_of

KIB = 1 << 10
MEM_UPDATE_PERIOD_S = 0.1  # docs/protocol.md: at most one MEM_UPDATE per device per 100 ms


def _footprints_before_lock_requests(rec: RecordingScheduler, device: int) -> list[tuple[int, int] | None]:
    """For each REQ_LOCK of `device`: the footprint of the MEM_UPDATE sent for that device right
    before it (the previous message about the device), or None where that message was something
    else."""
    out = []
    msgs = rec.messages(device=device)
    for i, r in enumerate(msgs):
        if r.type != MessageType.REQ_LOCK:
            continue
        prev = msgs[i - 1] if i > 0 else None
        out.append(prev.footprint if prev and prev.type == MessageType.MEM_UPDATE else None)
    return out


# ------------------------------------------------------------------------------------------------
# 1. MEM_UPDATE before every REQ_LOCK, with the current footprint


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_mem_update_before_every_lock_request_carries_the_current_footprint(world, recorder):
    """Converted (cuMemAlloc) and own managed memory count as managed_bytes, VMM cuMemCreate as
    other_bytes. The third request comes with no change since the second: the MEM_UPDATE is sent
    all the same (always before REQ_LOCK, not only when the footprint changed)."""
    app = world.app("init", "ctx", 0, "alloc", "1M", "managed", "2M", "vmm", "4M", "launch", 1, "pause",
                    "free", "last", "alloc", "512K", "vmmrelease", "launch", 1, "pause",
                    "sleep", 300, "launch", 1, "pause",
                    env={"NVSHARE_IDLE_RELEASE_MS": 0})  # keep the lock until it is dropped
    for n in (1, 2, 3):
        app.paused(nth=n)
        assert app.steps("launch")[n - 1]["ret"] == 0
        recorder.wait_count(MessageType.REQ_LOCK, n, device=0)
        if n < 3:
            recorder.drop(0)
            recorder.wait_count(MessageType.LOCK_RELEASED, n, device=0)
        app.resume()
    assert app.finish() == 0
    assert [s for s in app.lines if s.get("ret", 0) != 0] == [], "every step succeeded"

    types = [r.type for r in recorder.messages()]
    assert types[0] == MessageType.HELLO, types
    assert types.index(MessageType.ATTACH) < types.index(MessageType.MEM_UPDATE), \
        "the device is attached before its first MEM_UPDATE"
    assert _footprints_before_lock_requests(recorder, 0) == [
        (1 * MIB + 2 * MIB, 4 * MIB),  # converted + own managed, VMM
        (1 * MIB + 512 * KIB, 0),      # the managed 2M freed, 512K converted added, VMM released
        (1 * MIB + 512 * KIB, 0),      # unchanged, and sent again
    ], recorder.summary()
    assert recorder.errors == []


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_mem_update_before_lock_request_is_per_device(world, recorder):
    """One process on two devices: each REQ_LOCK is preceded by that device's own footprint."""
    app = world.app("init", "ctx", 0, "alloc", "1M", "ctx", 1, "alloc", "2M", "managed", "1M", "vmm", "3M",
                    "launch", 1, "ctx", 0, "launch", 1, "pause",
                    env={"MOCK_CUDA_DEVICES": 2, "NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused()
    assert [s["ret"] for s in app.steps("launch")] == [0, 0]
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=1)
    app.resume()
    assert app.finish() == 0
    assert _footprints_before_lock_requests(recorder, 1) == [(3 * MIB, 3 * MIB)], recorder.summary()
    assert _footprints_before_lock_requests(recorder, 0) == [(1 * MIB, 0)], recorder.summary()
    attach = {r.msg.device: r.msg.uuid for r in recorder.messages(MessageType.ATTACH)}
    assert attach == {0: uuid_of(0), 1: uuid_of(1)}


# ------------------------------------------------------------------------------------------------
# 2. coalescing


BURST = 200
BURST_SIZE = 64 * KIB


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
@pytest.mark.parametrize("holding", [True, False], ids=["lock-held", "lock-idle"])
def test_allocation_burst_is_coalesced_and_the_final_footprint_arrives(world, recorder, holding):
    """200 allocations in about 50 ms: the MEM_UPDATEs are at most one per 100 ms (counted against the
    burst's own measured duration, so a slow box only allows more), and the last one carries the
    final footprint without any further activity from the application."""
    # The first allocation (before the burst) attaches the device and sends the first update.
    lead = ["launch", 1] if holding else ["alloc", "64K"]
    # a short sleep every few allocations lets the client thread run inside the burst
    burst = [step for k in range(BURST) for step in ("alloc", "64K", *(("sleep", 1) if k % 4 == 3 else ()))]
    # After the pause, one more allocation: its MEM_UPDATE is the marker. The library sends in order
    # on one connection, so every update of the burst (any late one included) arrives before it.
    app = world.app("init", "ctx", 0, *lead, "sleep", 1, *burst, "pause", "alloc", "64K", "pause",
                    env={"NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused(timeout=30)
    allocs = app.steps("alloc")[-BURST:]
    assert [a["ret"] for a in allocs] == [0] * BURST
    final = (BURST + (0 if holding else 1)) * BURST_SIZE
    marker = (final + BURST_SIZE, 0)

    def updates():
        return [r.footprint for r in recorder.messages(MessageType.MEM_UPDATE)]

    def final_arrived():
        got = recorder.messages(MessageType.MEM_UPDATE, device=0)
        return got and got[-1].footprint == (final, 0)
    poll(final_arrived, 10, what=lambda: f"a MEM_UPDATE with the final {final} bytes (got {updates()})")
    app.resume()
    app.paused(nth=2)
    poll(lambda: marker in updates(), 10, what=lambda: f"the marker MEM_UPDATE {marker} (got {updates()})")
    app.resume()
    assert app.finish() == 0

    everything = recorder.messages(device=0)
    at_marker = next(i for i, r in enumerate(everything)
                     if r.type == MessageType.MEM_UPDATE and r.footprint == marker)
    assert [r for r in everything[at_marker + 1:] if r.type == MessageType.REQ_LOCK] == []
    msgs = everything[:at_marker]  # what the burst caused, complete
    lock_requests = [i for i, r in enumerate(msgs) if r.type == MessageType.REQ_LOCK]
    assert len(lock_requests) == (1 if holding else 0), recorder.summary()
    # the update that goes with a REQ_LOCK is the exception to the 100 ms rule; the others coalesce
    periodic = [r for i, r in enumerate(msgs)
                if r.type == MessageType.MEM_UPDATE and i + 1 not in lock_requests]
    # Every footprint change happened between the step before the burst and the burst's last step:
    # updates sent at least 100 ms apart in that window, plus the one that may follow its end.
    start = app.steps("sleep")[0]["t"] if holding else app.steps("alloc")[0]["t"]
    window = (allocs[-1]["t"] - start) / 1e9
    # sent >= 100 ms apart: one per started 100 ms of the window, one after it, one of slack
    allowed = int(window / MEM_UPDATE_PERIOD_S) + 3
    values = [r.footprint[0] for r in periodic]
    seen = [(round((r.at - periodic[0].at) * 1000), r.footprint[0]) for r in periodic]
    assert len(periodic) <= allowed, (f"{len(periodic)} MEM_UPDATEs for {BURST} allocations in "
                                      f"{window * 1000:.0f} ms (at most {allowed}); (ms, bytes): {seen}")
    assert values == sorted(values), "footprints only grew"
    assert periodic[-1].footprint == (final, 0)
    assert recorder.errors == []


# ------------------------------------------------------------------------------------------------
# 3. the real scheduler shows it


def _ctl_status(world) -> dict:
    env = clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(world.socket), "status", "--json"]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, f"nvsharectl status --json exited with {r.returncode}: {r.stderr}"
    return json.loads(r.stdout)


def _held_per_gpu(world, pid: int) -> dict[str, tuple[int, int]] | None:
    client = next((c for c in _ctl_status(world)["clients"] if c["pid"] == pid), None)
    if client is None:
        return None
    return {g["uuid"]: (g["managed_bytes"], g["other_bytes"]) for g in client["gpus"]}


def _wait_status_shows(world, pid: int, want: dict[str, tuple[int, int]]):
    """Poll `nvsharectl status --json` until pid's (managed, other) bytes per GPU UUID are `want`."""
    seen = []

    def matches():
        seen.append(_held_per_gpu(world, pid))
        return seen[-1] == want
    poll(matches, 10, 0.1, what=lambda: f"nvsharectl status to show {want} for pid {pid} (last seen {seen[-1:]})")


def test_nvsharectl_status_shows_what_the_client_holds_per_gpu(world):
    world.scheduler(mode="serial")
    app = world.app("init",
                    "ctx", 0, *["alloc", "1M"] * 60, "managed", "3M",
                    "ctx", 1, *["alloc", "2M"] * 20, "vmm", "5M",
                    "pause",
                    "free", "last", "free", "last", "vmmrelease",  # frees two 2M blocks on GPU 1
                    "pause",
                    env={"MOCK_CUDA_DEVICES": 2})
    allocated = {uuid_of(0): (63 * MIB, 0), uuid_of(1): (40 * MIB, 5 * MIB)}
    app.paused()
    _wait_status_shows(world, app.pid, allocated)
    app.resume()
    app.paused(nth=2)
    _wait_status_shows(world, app.pid, {**allocated, uuid_of(1): (36 * MIB, 0)})
    app.resume()
    assert app.finish() == 0


def test_a_restarted_scheduler_learns_an_idle_clients_footprint(world):
    """After re-registering, the client sends what it holds even though nothing changed since."""
    sched = world.scheduler(mode="serial")
    app = world.app("init", "ctx", 0, *["alloc", "1M"] * 8, "managed", "2M", "pause",
                    env={"NVSHARE_IDLE_RELEASE_MS": 60000})
    app.paused()
    _wait_status_shows(world, app.pid, {uuid_of(0): (10 * MIB, 0)})
    sched.kill(signal.SIGKILL)
    again = world.scheduler(mode="serial")
    again.wait_client(app.pid, timeout=30)
    _wait_status_shows(world, app.pid, {uuid_of(0): (10 * MIB, 0)})  # no allocation since the restart
    app.resume()
    assert app.finish() == 0
