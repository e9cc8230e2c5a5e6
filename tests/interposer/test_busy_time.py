"""GPU busy time measured by the library (gate.c, "Busy time") and reported in BUSY_UPDATE.

The mock driver models a GPU (MOCK_CUDA_KERNEL_US): launches queue GPU time on one timeline and
return at once, events complete when the work before them ends, synchronisations wait for it. A
program runs bursts of work with idle gaps (synchronise, then sleep as long as the burst), back to
back saturating work, and many tiny kernels; the busy time the real scheduler shows for it must be
within 5% of what the program itself would time around its work: from the start of its first launch
of each burst to the return of the synchronisation that ends it (cuda_app's step times).
"""

from __future__ import annotations

import time

import pytest

from xpushare.wire.protocol import FEATURE_BUSY, FEATURE_BUSY_SPANS, MessageType

from .harness import poll

pytestmark = pytest.mark.exclusive  # the mock GPU's kernels take wall-clock time

TOLERANCE = 0.05


def _reference_s(app) -> float:
    """What the program would time with events around each burst: from the end of the step before
    a burst's first launch to the end of the synchronisation that ends the burst."""
    total, start, prev = 0.0, None, None
    for line in app.lines:
        step = line.get("step")
        if step == "launch" and start is None:
            start = prev
        elif step in ("streamsync", "ctxsync") and start is not None:
            total += (line["t"] - start) / 1e9
            start = None
        prev = line.get("t", prev)
    return total


def _busy_s(sched, pid: int) -> float:
    c = sched.client(pid)
    return c["gpus"][0]["gpu_busy_seconds"] if c else 0.0


def _cpu_s(pid: int) -> float:
    """User and system CPU time of a process so far, seconds."""
    import os
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(world, kernel_us: int, steps, hold: bool = False) -> tuple[float, float]:
    """hold: the program keeps the lock when idle (no idle release): its busy time must come in
    the periodic reports, and its client thread must not spin meanwhile."""
    sched = world.scheduler(mode="serial", tq=30)
    env = {"MOCK_CUDA_KERNEL_US": kernel_us, "MOCK_CUDA_LOG": None}
    if hold:
        env["NVSHARE_IDLE_RELEASE_MS"] = 0
    app = world.app("init", "ctx", "0", *steps, "pause", env=env)
    app.paused(timeout=60)
    ref = _reference_s(app)
    assert ref > 0.1, app.lines
    # reported while the lock is still held: at most about a second after the work
    poll(lambda: _busy_s(sched, app.pid) >= ref * (1 - TOLERANCE), 10, 0.05,
         what=f"busy time to reach {ref:.3f} s")
    cpu = _cpu_s(app.pid)
    time.sleep(1.5)  # and it does not keep growing past it
    # holding the lock with nothing to do, the client thread wakes about once a second: no spin
    assert _cpu_s(app.pid) - cpu < 0.3
    busy = _busy_s(sched, app.pid)
    app.resume()
    assert app.finish(30) == 0
    return busy, ref


@pytest.mark.parametrize("stream", ["stream", "nostream"])
def test_bursts_with_idle_gaps_count_only_the_bursts(world, stream):
    sync = "streamsync" if stream == "stream" else "ctxsync"
    burst = ["launch", "150", sync, "sleep", "150"]
    busy, ref = _run(world, 1000, [stream, *burst * 3])
    assert ref == pytest.approx(0.45, rel=0.2)
    assert busy == pytest.approx(ref, rel=TOLERANCE), (busy, ref)


def test_back_to_back_saturating_work(world):
    busy, ref = _run(world, 2000, ["launch", "300", "ctxsync"], hold=True)
    assert busy == pytest.approx(ref, rel=TOLERANCE), (busy, ref)


def test_many_tiny_kernels(world):
    busy, ref = _run(world, 20, ["launch", "10000", "ctxsync", "sleep", "200",
                                 "launch", "10000", "ctxsync"], hold=True)
    assert busy == pytest.approx(ref, rel=TOLERANCE), (busy, ref)


@pytest.mark.parametrize("features, sent, not_sent", [
    (0, MessageType.REQ_LOCK, MessageType.BUSY_UPDATE),
    (FEATURE_BUSY, MessageType.BUSY_UPDATE, MessageType.BUSY_SPANS),
])
def test_no_busy_messages_to_a_scheduler_that_does_not_offer_them(world, recorder, features, sent,
                                                                  not_sent):
    recorder.welcome_features = features
    app = world.app("init", "ctx", "0", "launch", "50", "ctxsync", "sleep", "1500",
                    env={"MOCK_CUDA_KERNEL_US": 1000})
    assert app.finish(30) == 0
    assert recorder.messages(sent)
    assert not recorder.messages(not_sent)


def test_a_release_is_preceded_by_the_busy_time_of_its_hold(world, recorder):
    recorder.welcome_features = FEATURE_BUSY
    app = world.app("init", "ctx", "0", "launch", "100", "ctxsync", "pause",
                    env={"MOCK_CUDA_KERNEL_US": 1000, "NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused(timeout=30)
    recorder.wait_count(MessageType.REQ_LOCK, 1)
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    sent = [r for r in recorder.messages(MessageType.BUSY_UPDATE, MessageType.LOCK_RELEASED)]
    i = next(k for k, r in enumerate(sent) if r.type == MessageType.LOCK_RELEASED)
    assert i > 0 and sent[i - 1].type == MessageType.BUSY_UPDATE, [r.type for r in sent]
    assert sent[i - 1].msg.busy_ns / 1e9 == pytest.approx(0.1, rel=TOLERANCE)
    busy = [r.msg.busy_ns for r in sent if r.type == MessageType.BUSY_UPDATE]
    assert busy == sorted(busy)
    app.resume()
    assert app.finish(30) == 0


def test_work_that_is_never_synchronised_is_counted_while_the_lock_is_held(world, recorder):
    """No synchronisation, no release: the client thread retires the finished checkpoints about
    once a second and reports them; only the work after the last checkpoint waits for an idle
    point (at most one checkpoint interval)."""
    recorder.welcome_features = FEATURE_BUSY
    app = world.app("init", "ctx", "0", "launch", "400", "pause",
                    env={"MOCK_CUDA_KERNEL_US": 2000, "NVSHARE_IDLE_RELEASE_MS": 0,
                         "MOCK_CUDA_LOG": None})
    app.paused(timeout=30)

    def reported():
        msgs = recorder.messages(MessageType.BUSY_UPDATE)
        return msgs[-1].msg.busy_ns / 1e9 if msgs else 0.0
    poll(lambda: reported() >= 0.8 * 0.8, 10, 0.05, what="busy time of unsynchronised work")
    assert reported() <= 0.8 * (1 + TOLERANCE)
    assert not recorder.messages(MessageType.LOCK_RELEASED)
    app.resume()
    assert app.finish(30) == 0


def _bursts(app) -> list[tuple[int, int]]:
    """(before the first launch, after the synchronisation that ends it) of each burst, host ns:
    a line's t is when its step ended."""
    out, start, prev = [], None, None
    for line in app.lines:
        if line.get("step") == "launch" and start is None:
            start = prev
        elif line.get("step") in ("streamsync", "ctxsync") and start is not None:
            out.append((start, line["t"]))
            start = None
        prev = line.get("t", prev)
    return out


def test_busy_spans_say_when_each_burst_kept_the_gpu_busy(world, recorder):
    """BUSY_SPANS, before the BUSY_UPDATE they explain: one span per burst, from its first launch
    to its synchronisation on the host's clock, with the burst's GPU time; the sleeps are in none,
    and the spans' GPU time is the update's increase."""
    recorder.welcome_features = FEATURE_BUSY | FEATURE_BUSY_SPANS
    burst = ["launch", "100", "ctxsync", "sleep", "300"]
    app = world.app("init", "ctx", "0", *burst * 3, "pause",
                    env={"MOCK_CUDA_KERNEL_US": 1000, "NVSHARE_IDLE_RELEASE_MS": 0})
    app.paused(timeout=30)
    poll(lambda: sum(s[2] for r in recorder.messages(MessageType.BUSY_SPANS)
                     for s in r.msg.intervals()) >= 0.3e9 * (1 - TOLERANCE), 10, 0.05,
         what="the spans of three bursts")
    sent = recorder.messages(MessageType.BUSY_SPANS, MessageType.BUSY_UPDATE)
    spans = [s for r in sent if r.type == MessageType.BUSY_SPANS for s in r.msg.intervals()]
    for i, r in enumerate(sent):  # each BUSY_SPANS comes right before its BUSY_UPDATE
        if r.type == MessageType.BUSY_SPANS:
            assert sent[i + 1].type == MessageType.BUSY_UPDATE
    updates = [r.msg.busy_ns for r in sent if r.type == MessageType.BUSY_UPDATE]
    assert sum(b for _, _, b in spans) == updates[-1]
    bursts = _bursts(app)
    assert len(bursts) == 3 and len(spans) == 3, (bursts, spans)
    for (start, end, busy), (first, synced) in zip(spans, bursts):
        assert busy / 1e9 == pytest.approx(0.1, rel=TOLERANCE)
        # opened by the first launch, closed when the synchronisation returned (the lines are
        # written around the calls: allow their printing, and a moment's loss of the CPU on a
        # loaded two-core machine, beyond 5 ms at times; the sleeps, 300 ms, are far outside)
        slack = 30e6
        assert first - slack <= start <= first + slack and synced - slack <= end <= synced + slack
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))  # the sleeps are in none
    app.resume()
    assert app.finish(30) == 0


def test_an_open_span_is_cut_at_each_report_and_goes_on(world, recorder):
    """Work never synchronised: the span stays open; a report cuts it once it is a period old
    (not sooner: the checkpoints in flight would carry time across the cut), where the next
    begins, so the spans tile the time the GPU was busy, and each report says one is open."""
    recorder.welcome_features = FEATURE_BUSY | FEATURE_BUSY_SPANS
    app = world.app("init", "ctx", "0", "launch", "1200", "pause",
                    env={"MOCK_CUDA_KERNEL_US": 2000, "NVSHARE_IDLE_RELEASE_MS": 0,
                         "MOCK_CUDA_LOG": None})
    app.paused(timeout=30)
    def spans():
        return [s for r in recorder.messages(MessageType.BUSY_SPANS) for s in r.msg.intervals()]
    poll(lambda: len(spans()) >= 2, 10, 0.05, what="two pieces of an open span")
    got = spans()
    assert all(a[1] == b[0] for a, b in zip(got, got[1:])), got
    assert all(b <= (e - s) * 1.1 and e - s >= 0.99e9 for s, e, b in got), got
    last = [r.msg for r in recorder.messages(MessageType.BUSY_SPANS) if r.msg.count][-1]
    assert last.open_ns == last.intervals()[-1][1]
    app.resume()
    assert app.finish(30) == 0


def test_spans_faster_than_reports_are_joined_without_losing_time(world, recorder):
    """Hundreds of short bursts, each synchronised: a report goes as soon as 16 spans wait (at
    most one per 50 ms), and past that the closest are joined; no message carries more than 16,
    the spans stay in order, and their GPU time is all the BUSY_UPDATEs say."""
    recorder.welcome_features = FEATURE_BUSY | FEATURE_BUSY_SPANS
    app = world.app("init", "ctx", "0", *["launch", "1", "ctxsync"] * 300, "pause",
                    env={"MOCK_CUDA_KERNEL_US": 1000, "NVSHARE_IDLE_RELEASE_MS": 0,
                         "MOCK_CUDA_LOG": None})
    app.paused(timeout=30)
    poll(lambda: sum(s[2] for r in recorder.messages(MessageType.BUSY_SPANS)
                     for s in r.msg.intervals()) >= 0.3e9 * (1 - TOLERANCE), 10, 0.05,
         what="the spans of 300 bursts")
    msgs = [r.msg for r in recorder.messages(MessageType.BUSY_SPANS)]
    spans = [s for m in msgs for s in m.intervals()]
    assert all(m.count <= 16 for m in msgs)
    assert len(msgs) >= 3 and len(spans) < 300  # reported as they filled, and some were joined
    assert all(s < e for s, e, _ in spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    update = recorder.messages(MessageType.BUSY_UPDATE)[-1].msg.busy_ns
    assert sum(b for _, _, b in spans) == update
    app.resume()
    assert app.finish(30) == 0
