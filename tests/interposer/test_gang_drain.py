"""The bounded drain of a gang drop (docs/protocol.md, DROP_LOCK flags bit 1 `GANG`; issue 12).

A 2-rank job whose rank 1 never launches: rank 0 (under the library, the fake scheduler granting
at once) launches its first collective, which waits for the peer (the mock's modelled GPU,
MOCK_CUDA_KERNEL_US > 0). A DROP_LOCK with GANG must then be answered within about
NVSHARE_GANG_DRAIN_MS although the work never finishes; a plain DROP_LOCK (or the bound set to 0)
keeps waiting for all the work, and releases only after the peer came. After a bounded release the
process asks for the lock again, and with the peer there it finishes its steps.

Times compared across processes are CLOCK_MONOTONIC (the fake scheduler's, the mock's log).
"""

from __future__ import annotations

import time

from xpushare.wire.protocol import DROP_GANG, MessageType

KERNEL_US = 2000
BOUND_MS = 300
QUIET_S = 1.0  # well past the bound: a drain that waits for all the work has not answered by then


def _env(job_dir, **extra):
    env = {"MOCK_CUDA_DEVICES": 2, "MOCK_CUDA_KERNEL_US": KERNEL_US,
           "MOCK_CUDA_COLLECTIVE_DIR": job_dir, "MOCK_CUDA_COLLECTIVE_WORLD": 2,
           # an idle release would drain without the bound: only the drops under test release
           "NVSHARE_IDLE_RELEASE_MS": 0, "NVSHARE_GANG_DRAIN_MS": BOUND_MS}
    env.update(extra)
    return env


def _rank0(world, steps=1, **extra):
    """Rank 0 under the library. It pauses after its steps: a process that exits right after its
    last synchronisation could end before its client thread sent LOCK_RELEASED."""
    job = world.dir / "job"
    app = world.app("init", "ctx", 0, "stream", "collective", steps, 2, "pause", env=_env(job, **extra))
    return app, job


def _finish(app):
    app.paused()
    app.resume()
    return app.finish()


def _peer(world, job, steps=1):
    """Rank 1 of the job, without the library (nothing gates it)."""
    return world.app("init", "ctx", 1, "stream", "collective", steps, 2, env=_env(job), preload=False)


def _collective_launches(log, pid):
    return [e for e in log.entries(pid, "cuLaunchKernel") if "collective" in e]


def _in_collective(world, recorder, app):
    """The app was granted the lock and launched its first collective, which waits for the peer."""
    until = time.monotonic() + 15
    while not _collective_launches(world.log, app.pid):
        assert time.monotonic() < until, f"no collective launch: {recorder.summary()}"
        assert app.proc.poll() is None, app.stderr()
        time.sleep(0.02)
    assert [m.msg.device for m in recorder.sent_messages(MessageType.LOCK_OK)] == [0]


def _drop(recorder, flags):
    recorder.drop(0, flags=flags)
    return recorder.sent_messages(MessageType.DROP_LOCK)[-1]


def _released(recorder):
    return recorder.messages(MessageType.LOCK_RELEASED, device=0)


def test_gang_drop_releases_after_the_bound_while_the_collective_waits(world, recorder):
    app, _ = _rank0(world)
    _in_collective(world, recorder, app)
    drop = _drop(recorder, DROP_GANG)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0, timeout=BOUND_MS / 1000 + 5)
    (rel,) = _released(recorder)
    waited = rel.at - drop.at
    assert waited >= BOUND_MS / 1000 * 0.8, waited
    assert waited < BOUND_MS / 1000 + 1.5, waited
    assert rel.msg.reason == 0 and rel.msg.drain_us >= BOUND_MS * 1000 * 0.8, rel.msg
    # the work really was unfinished: the collective still waits, the app is still in it
    assert not app.steps("collective") and app.proc.poll() is None
    assert not world.log.entries(app.pid, "mock_collective")
    err = app.stderr()
    assert err.count("NVSHARE_GANG_DRAIN_MS") == 1, err
    # the drain polled (never a blocking wait on the work) and ended the busy span on the legacy
    # stream; it never called cuCtxSynchronize
    after = [e for e in world.log.entries(app.pid) if e["t0"] >= drop.at_ns]
    assert not [e for e in after if e["fn"] in ("cuCtxSynchronize", "cuEventSynchronize")], after
    queries = [e for e in after if e["fn"] == "cuEventQuery" and e["t0"] < rel.at_ns]
    assert 10 <= len(queries) <= BOUND_MS * 4, len(queries)  # short sleeps, no spinning


def test_plain_drop_waits_for_the_peer(world, recorder):
    app, job = _rank0(world)
    _in_collective(world, recorder, app)
    _drop(recorder, 0)
    time.sleep(QUIET_S)
    assert _released(recorder) == [], recorder.summary()
    peer = _peer(world, job)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    (peer_launch,) = _collective_launches(world.log, peer.pid)
    (rel,) = _released(recorder)
    assert rel.at_ns > peer_launch["t0"], "released before the peer's collective launch"
    assert peer.finish() == 0 and _finish(app) == 0
    assert "NVSHARE_GANG_DRAIN_MS" not in app.stderr()


def test_gang_drop_with_bound_zero_waits_for_the_peer(world, recorder):
    app, job = _rank0(world, NVSHARE_GANG_DRAIN_MS=0)
    _in_collective(world, recorder, app)
    _drop(recorder, DROP_GANG)
    time.sleep(QUIET_S)
    assert _released(recorder) == [], recorder.summary()
    peer = _peer(world, job)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    (peer_launch,) = _collective_launches(world.log, peer.pid)
    assert _released(recorder)[0].at_ns > peer_launch["t0"]
    assert peer.finish() == 0 and _finish(app) == 0


def test_after_a_bounded_release_the_job_runs_again_and_finishes(world, recorder):
    steps = 3
    app, job = _rank0(world, steps=steps)
    _in_collective(world, recorder, app)
    drop = _drop(recorder, DROP_GANG)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0, timeout=BOUND_MS / 1000 + 5)
    rel = _released(recorder)[0]
    assert rel.at > drop.at
    # the peer comes: collective 1 ends, and the next step's launch asks for the lock again
    peer = _peer(world, job, steps=steps)
    recorder.wait_count(MessageType.REQ_LOCK, 2, device=0)
    assert recorder.messages(MessageType.REQ_LOCK, device=0)[1].at > rel.at
    assert peer.finish() == 0 and _finish(app) == 0
    assert app.wait_step("done")["steps"] == steps
    assert [s["ret"] for s in app.steps("collective")] == [0] * steps
    assert len(recorder.sent_messages(MessageType.LOCK_OK, device=0)) == 2


def test_bad_bound_warns_once_and_uses_the_default(world, recorder):
    app, _ = _rank0(world, NVSHARE_GANG_DRAIN_MS="soon")
    _in_collective(world, recorder, app)
    drop = _drop(recorder, DROP_GANG)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0, timeout=5)
    rel = _released(recorder)[0]
    assert 0.4 <= rel.at - drop.at < 2.0, rel.at - drop.at  # the default, 500 ms
    assert app.stderr().count('NVSHARE_GANG_DRAIN_MS="soon"') == 1, app.stderr()


def test_gang_drop_releases_within_the_grants_quantum_when_it_is_shorter(world, recorder):
    """The scheduler evicts a holder still silent two quanta after the drop: with a quantum of
    100 ms the bound is 100 ms, not NVSHARE_GANG_DRAIN_MS (300 ms here), so the release comes
    before that eviction would."""
    recorder.grant_quantum_ms = 100
    app, _ = _rank0(world)
    _in_collective(world, recorder, app)
    drop = _drop(recorder, DROP_GANG)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0, timeout=5)
    (rel,) = _released(recorder)
    assert 0.08 <= rel.at - drop.at < 2 * 0.1, rel.at - drop.at
    assert 80_000 <= rel.msg.drain_us < BOUND_MS * 1000 * 0.8, rel.msg
    assert not app.steps("collective") and app.proc.poll() is None
