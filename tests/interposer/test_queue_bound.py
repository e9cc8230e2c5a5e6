"""QUEUE_BOUND (native/src/gate/checkpoint.c, session/inbound.c): while the scheduler bounds a
client's queue (a latency-sensitive client shares its GPU), the GPU time the client has queued past its gate stays
within the bound, a drop then drains within it, and a lifted bound lets the queue grow back to
NVSHARE_DRAIN_TARGET_MS. Checked on the mock driver's modelled GPU timeline rebuilt from its call
log (MOCK_CUDA_KERNEL_US: each launch queues that much GPU time), as test_quota.py does: the
backlog a launch finds is what the GPU still has to run when it is made."""

from __future__ import annotations

import threading
import time

import pytest

from xpushare.wire.protocol import MessageType

from .harness import poll

pytestmark = pytest.mark.exclusive  # the mock GPU's kernels take wall-clock time

KERNEL_US = 100
BOUND_US = 2000
# The bound is on the GPU time between checkpoints (a ring of them): a span may overshoot its share
# by the one interval being recorded when it is judged, and the launch path runs one interval past
# the last checkpoint. A kernel or two of slack; the unbounded queue is 50 times the bound.
SLACK_US = 3 * KERNEL_US


def _timeline(world, pid: int, kernel_us) -> list[tuple[int, int, int]]:
    """(submission ns, GPU time queued ahead of it in us, GPU idle time before it in us) of each
    launch, in order, the launches queueing kernel_us (the app's MOCK_CUDA_KERNEL_US: one time,
    or a list of them in turn)."""
    times = kernel_us if isinstance(kernel_us, (list, tuple)) else [kernel_us]
    out, free = [], 0
    launches = [e for e in world.log.entries(pid, fn="cuLaunchKernel") if e.get("ret", 0) == 0]
    for i, e in enumerate(sorted(launches, key=lambda e: e["t0"])):
        out.append((e["t0"], max(0, free - e["t0"]) / 1000, max(0, e["t0"] - free) / 1000 if free else 0))
        free = max(e["t0"], free) + times[i % len(times)] * 1000
    return out


def _backlog(world, pid: int, kernel_us: int = KERNEL_US) -> list[tuple[int, int]]:
    """(submission ns, GPU time queued ahead of it in us) of each launch, in order."""
    return [(t, q) for t, q, _ in _timeline(world, pid, kernel_us)]


def _between(backlog, a: float, b: float) -> list[float]:
    return [q for t, q in backlog if int(a * 1e9) <= t < int(b * 1e9)]


def _applied(app, n: int):
    poll(lambda: app.stderr().count("queue bound") >= n, 10, what=f"{n} QUEUE_BOUND applied")


def test_the_queue_stays_within_the_bound_and_grows_back_when_it_is_lifted(world, recorder):
    app = world.app("init", "ctx", "0", "launch", "30000", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": KERNEL_US, "NVSHARE_DEBUG": 1})
    time.sleep(0.6)
    recorder.queue_bound(0, BOUND_US)
    t_on = time.monotonic()
    _applied(app, 1)
    time.sleep(0.8)
    t_drop = time.monotonic()
    recorder.drop(0)
    recorder.wait_count(MessageType.LOCK_RELEASED, 1)
    time.sleep(0.5)
    recorder.queue_bound(0, 0)
    t_off = time.monotonic()
    _applied(app, 2)
    assert app.finish(90) == 0, app.stderr()
    q = _backlog(world, app.pid)
    before = _between(q, t_on - 0.3, t_on)
    # The work queued before the bound arrived runs out first (the ring's older spans).
    during = _between(q, t_on + 0.2, t_off)
    after = _between(q, t_off + 0.5, t_off + 5)
    print(f"backlog before {max(before):.0f} us, during {max(during):.0f} us, after "
          f"{max(after):.0f} us")
    assert max(before) > 10 * BOUND_US          # unbounded: near NVSHARE_DRAIN_TARGET_MS
    assert max(during) <= BOUND_US + SLACK_US
    assert max(after) > 5 * BOUND_US            # lifted: it grows back
    # The drop found at most the bound queued: the last launch before it ends within it.
    ahead = [t / 1e9 + (qd + KERNEL_US) / 1e6 for t, qd in q if t < int(t_drop * 1e9)]
    assert max(ahead) - t_drop <= (BOUND_US + SLACK_US) / 1e6
    said = [ln.split("queue bound ")[1] for ln in app.stderr().splitlines() if "queue bound " in ln]
    assert said == ["2.000 ms", "lifted, was 2.000 ms"], said


LONG_KERNEL_US = 1000


def test_kernels_longer_than_a_span_are_held_to_the_bound_too(world, recorder):
    """A training job's kernels are each longer than the bound's share of a checkpoint span, so it
    checkpoints every launch; the ring of checkpoints alone would still let NVS_RING kernels queue
    (8 ms here against a 2 ms bound). Under a bound the ring is only as deep as the bound holds of
    the spans measured: the queue a launch finds stays within the bound."""
    app = world.app("init", "ctx", "0", "launch", "2500", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": LONG_KERNEL_US, "NVSHARE_DEBUG": 1})
    time.sleep(0.4)
    recorder.queue_bound(0, BOUND_US)
    t_on = time.monotonic()
    _applied(app, 1)
    assert app.finish(60) == 0, app.stderr()
    q = _backlog(world, app.pid, LONG_KERNEL_US)
    before = _between(q, t_on - 0.3, t_on)
    # what was queued before the bound (about a second of it) runs out first
    during = _between(q, t_on + 1.3, t_on + 2.0)
    print(f"backlog before {max(before):.0f} us, during {max(during):.0f} us")
    assert max(before) > 4 * BOUND_US     # unbounded
    assert during and max(during) <= BOUND_US + LONG_KERNEL_US  # one kernel past the last checkpoint


def test_the_bound_holds_a_launch_back_for_a_while_only(world, recorder):
    """Kernels far longer than the bound: holding each launch until the kernel before it finished
    would keep the thread one call ahead of the GPU, and work that waits for a later call of the
    same thread (a stream wait on a value it writes next) would never finish. So each bound plus
    2 ms a launch waits lets one more kernel join the queue, up to the ring's 8."""
    kernel_us = 20000
    # a few kernels first, so that the bound knows how long one takes; then a burst
    app = world.app("init", "ctx", "0", "launch", "1", "pause", "launch", "4", "ctxsync",
                    "launch", "20", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": kernel_us, "NVSHARE_DEBUG": 1})
    app.paused()
    recorder.queue_bound(0, BOUND_US)
    _applied(app, 1)
    app.resume()
    assert app.finish(60) == 0, app.stderr()
    burst = _backlog(world, app.pid, kernel_us)[5:]  # the first 5 ran out before it (ctxsync)
    most = max(q for _, q in burst)
    print(f"most queued ahead of a launch: {most:.0f} us")
    assert most >= 3 * kernel_us  # the host got ahead of the GPU by several kernels


def test_two_threads_launching_on_one_context_stay_within_the_bound(world, recorder):
    """The bound is on the context's queue, whichever threads fill it: two threads launching in
    turn on one context stay within it together. (A span's launch count is the recording thread's
    own and is believed only after that thread's own checkpoint; on this mock the threads take
    turns in runs long enough that the count was right either way.)"""
    loop = ["ctx", "0", "launch", "15000"]
    app = world.app("init", "ctx", "0", "thread", "{", *loop, "}", "thread", "{", *loop, "}",
                    "join", "ctxsync", env={"MOCK_CUDA_KERNEL_US": KERNEL_US, "NVSHARE_DEBUG": 1})
    time.sleep(0.4)
    recorder.queue_bound(0, BOUND_US)
    t_on = time.monotonic()
    _applied(app, 1)
    time.sleep(0.8)
    t_end = time.monotonic()
    assert app.finish(90) == 0, app.stderr()
    q = _backlog(world, app.pid)
    during = _between(q, t_on + 0.2, t_end)
    print(f"backlog during {max(during):.0f} us over {len(during)} launches")
    assert len(during) > 1000  # both threads were launching throughout
    assert max(during) <= BOUND_US + SLACK_US


def test_a_short_kernel_among_long_ones_keeps_the_depth(world, recorder, tmp_path):
    """1 ms kernels under a 2 ms bound (one queued behind the running one), whose spans then
    measure 1.0 and 0.1 ms in turn, as a training step of matrix products and elementwise kernels
    does. The ring's depth keeps the host one checkpoint ahead; judged by that depth, a 0.1 ms span
    looked far under its share and doubled the interval, past where the depth applies, and 8 spans
    of two kernels queued (17 ms)."""
    span = tmp_path / "span"
    app = world.app("init", "ctx", "0", "launch", "4500", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": LONG_KERNEL_US, "NVSHARE_DEBUG": 1,
                         "MOCK_CUDA_EVENT_SPAN_FILE": str(span)})
    time.sleep(0.4)
    recorder.queue_bound(0, BOUND_US)
    t_on = time.monotonic()
    _applied(app, 1)
    time.sleep(max(0.0, t_on + 1.5 - time.monotonic()))  # what was queued before it runs out
    stop, t_mix = threading.Event(), time.monotonic()

    def alternate_spans():
        while not stop.is_set():
            span.write_text("0.1")
            time.sleep(0.001)
            span.write_text("1.0")
            time.sleep(0.006)
    writer = threading.Thread(target=alternate_spans)
    writer.start()
    time.sleep(1.0)
    stop.set()
    writer.join()
    span.unlink()
    assert app.finish(60) == 0, app.stderr()
    q = _backlog(world, app.pid, LONG_KERNEL_US)
    calm = _between(q, t_on + 1.2, t_mix)
    mixed = _between(q, t_mix + 0.05, t_mix + 1.0)
    print(f"backlog calm {max(calm):.0f} us, mixed {max(mixed):.0f} us")
    assert max(calm) <= BOUND_US + LONG_KERNEL_US
    assert len(mixed) > 200 and max(mixed) <= BOUND_US + LONG_KERNEL_US


# (kernel times in turn, steps, the GPU's idle share at most: None where the host is slower than
# the small kernels, as the mock's launches are than 2 us ones)
@pytest.mark.parametrize("pattern, steps, max_idle", [([300, 10], 4000, 0.1),
                                                      ([300] + [2] * 15, 3000, None)],
                         ids=["one-small-each", "fifteen-small-each"])
def test_small_kernels_after_each_large_one_stay_within_the_bound(world, recorder, pattern, steps,
                                                                  max_idle):
    """A training step's large kernels (300 us) each followed by small ones (10 us; or 15 of 2 us,
    more than the ring's window of one-launch spans), under a 500 us bound: one large kernel fits,
    so the client checkpoints every launch and a launch waits for the large kernel before it. The
    small kernels' spans are far under their share; had they doubled the interval, spans of
    several kernels would have been out of the depth's reach and a ring of them queued (2.4 ms; with
    15 small kernels 0.5-0.8 ms, past the bound, when the large one was forgotten after 8). And
    the GPU is not starved meanwhile: it has the small kernel to run while the host comes back."""
    app = world.app("init", "ctx", "0", "launch", str(steps * len(pattern)), "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": ",".join(map(str, pattern)), "NVSHARE_DEBUG": 1})
    time.sleep(0.3)
    recorder.queue_bound(0, 500)
    t_on = time.monotonic()
    _applied(app, 1)
    assert app.finish(60) == 0, app.stderr()
    line = _timeline(world, app.pid, pattern)
    during = [(t, q, idle) for t, q, idle in line if int((t_on + 0.5) * 1e9) <= t]
    assert len(during) > 1000
    wall_us = (during[-1][0] - during[0][0]) / 1000
    idle_share = sum(idle for _, _, idle in during) / wall_us
    most = max(q for _, q, _ in during)
    print(f"GPU idle {idle_share:.1%} of {wall_us / 1e3:.0f} ms, most queued {most:.0f} us")
    assert most <= 500  # at one launch a checkpoint and depth 1: the large kernel and a small one
    assert max_idle is None or idle_share < max_idle
