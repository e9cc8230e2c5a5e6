"""Bounded drain (NVSHARE_DRAIN_TARGET_MS, default 100): checkpoint events bound the work queued on
a context, and how often they come adapts to the GPU time between them. A span between two
consecutive completed checkpoints longer than target / depth (depth: the checkpoints still queued
when it is judged, at most the ring's 8) halves the number of launches between checkpoints (down to
1); one shorter than a quarter of that doubles it (up to NVSHARE_MAX_INFLIGHT / 8). 0 keeps the
launch-count bound only (events without timing).

The mock driver's cuEventElapsedTime returns MOCK_CUDA_EVENT_SPAN_MS (or the number in
MOCK_CUDA_EVENT_SPAN_FILE, read at every call), so a test decides how long the GPU "took";
without them it returns the host time between the two records.
"""

from __future__ import annotations

import pytest

from xpushare.wire.protocol import MessageType

DEFAULT_MAX = 1024 // 8  # NVSHARE_MAX_INFLIGHT / 8: the launch-count bound
LONG_MS, SHORT_MS = 50, 1  # against the default target: > 100/8, < 100/32
DISABLE_TIMING = 2
# The mock's modelled GPU: each launch queues 20 us, so that a host that launches faster fills
# the ring (the spans a test sets are judged by how many checkpoints are queued).
QUEUED = {"MOCK_CUDA_KERNEL_US": 20}


def _checkpoint_gaps(log, pid: int, tid: int, since: int = 0, until: int | None = None) -> list[int]:
    """Launches of thread `tid` between consecutive checkpoint records (cuEventRecord of that
    thread), counted in the order of the mock's log; the first gap counts from `since`. The start
    events of busy-time spans (recorded before the first launch after an idle point: only ever the
    start of a span, never its end) are not checkpoints."""
    spans = [e for e in log.entries(pid) if e["fn"].startswith("cuEventElapsedTime")]
    starts_only = {e["start"] for e in spans} - {e["end"] for e in spans}
    gaps, n = [], 0
    for e in sorted(log.entries(pid), key=lambda e: e["t0"]):
        if e["tid"] != tid or e["t0"] < since or (until is not None and e["t0"] > until):
            continue
        if e["fn"] == "cuLaunchKernel" and e["ret"] == 0:
            n += 1
        elif e["fn"] == "cuEventRecord" and e["event"] not in starts_only:
            gaps.append(n)
            n = 0
    return gaps


def _main_tid(app) -> int:
    return app.lines[0]["tid"]


def _non_increasing(xs):
    return all(a >= b for a, b in zip(xs, xs[1:]))


def _non_decreasing(xs):
    return all(a <= b for a, b in zip(xs, xs[1:]))


def test_long_spans_make_checkpoints_more_frequent(world, recorder):
    app = world.run("init", "ctx", 0, "stream", "launch", 2500,
                    env={"MOCK_CUDA_EVENT_SPAN_MS": LONG_MS, "NVSHARE_IDLE_RELEASE_MS": 0, **QUEUED})
    log = world.log
    gaps = _checkpoint_gaps(log, app.pid, _main_tid(app))
    # Nothing is judged before a span completes: the first checkpoints go at the launch-count
    # bound while the ring fills (with 8 queued, a span may take 100 / 8 ms).
    assert gaps[:2] == [DEFAULT_MAX] * 2, gaps
    assert _non_increasing(gaps), gaps
    assert gaps[-5:] == [1] * 5, gaps
    timed = [e for e in log.entries(app.pid, "cuEventCreate") if e["tid"] == _main_tid(app)]
    assert timed and all(e["flags"] == 0 for e in timed), "checkpoint events are created with timing"
    spans = [e for e in log.entries(app.pid) if e["fn"].startswith("cuEventElapsedTime")]
    assert spans and all(e["ret"] == 0 for e in spans)


def test_short_spans_bring_the_interval_back_to_the_launch_count_bound(world, recorder, tmp_path):
    span = tmp_path / "span_ms"
    span.write_text(str(LONG_MS))
    app = world.app("init", "ctx", 0, "stream", "launch", 2500, "pause", "launch", 2500, "pause",
                    env={"MOCK_CUDA_EVENT_SPAN_FILE": span, "NVSHARE_IDLE_RELEASE_MS": 0, **QUEUED})
    first = app.paused()
    log, tid = world.log, _main_tid(app)
    assert _checkpoint_gaps(log, app.pid, tid)[-3:] == [1, 1, 1]
    span.write_text(str(SHORT_MS))
    app.resume()
    app.paused(nth=2, timeout=30)
    app.resume()
    assert app.finish() == 0
    gaps = _checkpoint_gaps(log, app.pid, tid, since=first["t"])
    assert _non_decreasing(gaps), gaps
    assert gaps[0] <= 2 and max(gaps) == DEFAULT_MAX and gaps[-5:] == [DEFAULT_MAX] * 5, gaps


@pytest.mark.parametrize("env, expect_gap, expect_timing", [
    ({"NVSHARE_DRAIN_TARGET_MS": 1000, "MOCK_CUDA_EVENT_SPAN_MS": LONG_MS}, DEFAULT_MAX, True),
    ({"NVSHARE_DRAIN_TARGET_MS": 0, "MOCK_CUDA_EVENT_SPAN_MS": LONG_MS}, DEFAULT_MAX, False),
    ({"NVSHARE_MAX_INFLIGHT": 64, "MOCK_CUDA_EVENT_SPAN_MS": SHORT_MS}, 64 // 8, True),
], ids=["target-1000ms", "target-0-count-only", "max-inflight-64"])
def test_the_interval_stays_where_target_and_bound_put_it(world, recorder, env, expect_gap, expect_timing):
    """A 50 ms span is within a 1000 ms target (125 / 31 ms); target 0 measures nothing; short spans
    never take the interval past NVSHARE_MAX_INFLIGHT / 8."""
    app = world.run("init", "ctx", 0, "stream", "launch", 700, env={**env, "NVSHARE_IDLE_RELEASE_MS": 0})
    log, tid = world.log, _main_tid(app)
    gaps = _checkpoint_gaps(log, app.pid, tid)
    assert gaps and set(gaps) == {expect_gap}, gaps
    spans = [e for e in log.entries(app.pid) if e["fn"].startswith("cuEventElapsedTime")]
    flags = {e["flags"] for e in log.entries(app.pid, "cuEventCreate") if e["tid"] == tid}
    if expect_timing:
        assert spans and flags == {0}
    else:
        assert spans == [] and flags == {DISABLE_TIMING}


def test_no_span_reaches_across_a_release(world, recorder):
    """After a drain the next span starts afresh: the time the GPU was given up (here 2 s, longer
    than a 10 s target allows between checkpoints: 1.25 s) never counts as queued work."""
    app = world.run("init", "ctx", 0, "stream", "launch", 300, "sleep", 2000, "launch", 400,
                    env={"NVSHARE_DRAIN_TARGET_MS": 10000, "NVSHARE_IDLE_RELEASE_MS": 100}, timeout=60)
    assert len(recorder.messages(MessageType.LOCK_RELEASED)) >= 1, "the idle release drained"
    assert len(recorder.messages(MessageType.REQ_LOCK)) >= 2
    gaps = _checkpoint_gaps(world.log, app.pid, _main_tid(app))
    assert len(gaps) >= 4 and set(gaps) == {DEFAULT_MAX}, gaps


def test_long_spans_with_a_short_queue_keep_the_interval(world, recorder):
    """Spans of 50 ms (the GPU time-slicing with another process's context stretches them so)
    with the host never ahead: each checkpoint is done by the next one's record, so a drain would
    find at most one span queued, within the 100 ms target, and the interval stays. Judged by the
    target over the whole ring (12.5 ms) it came down to one launch, and a server beside a training
    job waited for its own kernels on a full ring."""
    app = world.run("init", "ctx", 0, "stream", "launch", 700,
                    env={"MOCK_CUDA_EVENT_SPAN_MS": LONG_MS, "NVSHARE_IDLE_RELEASE_MS": 0})
    gaps = _checkpoint_gaps(world.log, app.pid, _main_tid(app))
    assert len(gaps) >= 4 and set(gaps) == {DEFAULT_MAX}, gaps


def test_no_span_reaches_across_a_synchronisation(world, recorder):
    """A server that synchronises and sleeps between short requests: the span from the checkpoint
    before the synchronisation holds the sleep, not queued work, and must not shrink the interval
    (it once did, down to a checkpoint every launch: each request then waited for its own kernels
    on a full ring, and under the GPU's time-slicing beside another process for that process's
    slices too). On the mock's modelled GPU every request's launches queue without waiting: the
    last one finds the request's earlier kernels queued, and the app never waits on a checkpoint."""
    kernel_us, launches, requests = 100, 40, 16
    steps = ["init", "ctx", 0]
    for _ in range(requests):
        steps += ["launch", launches, "ctxsync", "sleep", 30]
    app = world.run(*steps, env={"MOCK_CUDA_KERNEL_US": kernel_us, "NVSHARE_IDLE_RELEASE_MS": 0},
                    timeout=60)
    tid, log = _main_tid(app), world.log
    waits = [e for e in log.entries(app.pid, "cuEventSynchronize") if e["tid"] == tid]
    assert waits == [], f"the app waited on {len(waits)} checkpoint(s)"
    launched = sorted((e["t0"] for e in log.entries(app.pid, "cuLaunchKernel")
                       if e["tid"] == tid and e["ret"] == 0))
    assert len(launched) == launches * requests
    # The GPU time still queued ahead of each request's last launch (the timeline as the mock
    # keeps it: each launch starts when it is made or when the work before it ends).
    free, ahead = 0, []
    for i, t in enumerate(launched):
        if i % launches == launches - 1:
            ahead.append(max(0, free - t) / 1000)
        free = max(t, free) + kernel_us * 1000
    assert min(ahead[3:]) >= 0.5 * (launches - 1) * kernel_us, ahead


@pytest.mark.parametrize("value", ["fast", "-5"])
def test_a_bad_drain_target_warns_once_and_uses_100ms(world, recorder, value):
    app = world.run("init", "ctx", 0, "stream", "launch", 2500,
                    env={"NVSHARE_DRAIN_TARGET_MS": value, "MOCK_CUDA_EVENT_SPAN_MS": LONG_MS,
                         "NVSHARE_IDLE_RELEASE_MS": 0, **QUEUED})
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_DRAIN_TARGET_MS" in ln]
    assert len(warnings) == 1 and value in warnings[0], app.stderr()
    gaps = _checkpoint_gaps(world.log, app.pid, _main_tid(app))
    assert gaps[-1] == 1, f"50 ms spans against the default 100 ms target: {gaps}"


def test_release_reports_the_drain_time(world, recorder):
    sync_us = 150_000
    app = world.app("init", "ctx", 0, "launch", 1, "pause",
                    env={"MOCK_CUDA_SYNC_US": sync_us, "NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    (rel,) = [r.msg for r in recorder.messages(MessageType.LOCK_RELEASED)]
    assert rel.drain_us >= sync_us
    assert (rel.evict_us, rel.prefetch_us) == (0, 0)
    app.resume()
    assert app.finish() == 0


def test_a_drain_synchronises_every_context_of_the_device(world, recorder):
    """However many contexts a process made on a device, a drop drains them all before the lock is
    given back (the drain once took a snapshot of at most 64, and a 65th context's work ran on
    past LOCK_RELEASED)."""
    contexts = 70
    app = world.app("init", "ctx", 0, "contexts", contexts, "pause",
                    env={"NVSHARE_IDLE_RELEASE_MS": 0, "NVSHARE_DEBUG": 1})
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    before = len(world.log.entries(app.pid, "cuCtxSynchronize"))
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    synced = len(world.log.entries(app.pid, "cuCtxSynchronize")) - before
    # (the primary context ran nothing: the library has no record of it, and nothing to drain)
    assert synced == contexts, f"{synced} of {contexts} contexts synchronised"
    assert f"{contexts} context(s)" in app.stderr()
    app.resume()
    assert app.finish() == 0


@pytest.mark.parametrize("gpus", [2, 6, 10])
def test_a_thread_taking_turns_between_gpus_checkpoints_on_each(world, recorder, gpus):
    """Launches are counted per thread and context: a thread that launches on each GPU in turn
    (one model's layers on each) gets a checkpoint at least every interval of its launches on
    each. With one count for the thread, the count reached the interval only on the same GPU's
    launches (every 8th launch is always the second of two GPUs'), and the others had no in-flight
    bound. Past the 8 contexts whose counts a thread keeps, a context it comes back to
    checkpoints at its next launch (started at 0, a thread going round more contexts than it kept
    never reached the interval on any)."""
    turns = 200
    steps = ["init"]
    for _ in range(turns):
        for dev in range(gpus):
            steps += ["ctx", dev, "launch", 1]
    app = world.run(*steps, env={"NVSHARE_DRAIN_TARGET_MS": 0, "NVSHARE_MAX_INFLIGHT": 64,
                                 "NVSHARE_IDLE_RELEASE_MS": 0, "MOCK_CUDA_DEVICES": gpus})
    launches = {d: 0 for d in range(gpus)}
    gaps = {d: [] for d in range(gpus)}
    for e in sorted(world.log.entries(app.pid), key=lambda e: e["t0"]):
        if e["fn"] == "cuLaunchKernel" and e["ret"] == 0:
            launches[e["dev"]] += 1
        elif e["fn"] == "cuEventRecord":
            gaps[e["dev"]].append(launches[e["dev"]])
            launches[e["dev"]] = 0
    print("launches between checkpoints:", {d: sorted(set(g)) for d, g in gaps.items()})
    for dev in range(gpus):
        assert len(gaps[dev]) >= turns // 8 and max(gaps[dev]) <= 8, (dev, gaps[dev])
    if gpus <= 8:  # every count kept: every 8 launches on each (a first visit: at once)
        assert set(gaps[0]) == {8} and all(set(gaps[d][1:]) == {8} for d in range(1, gpus)), gaps
    else:  # more than it keeps: each visit checkpoints
        assert all(set(gaps[d]) == {1} for d in range(1, gpus)), gaps
