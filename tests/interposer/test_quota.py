"""The process's limits (native/src/gate/quota.c): a compute limit enforced at the gate, a live memory
limit, SETTINGS to a scheduler that offers QUOTAS and LIMITS from it.

The compute tests run a saturating program on the mock driver's modelled GPU (MOCK_CUDA_KERNEL_US:
launches queue GPU time on one timeline and return at once) and rebuild that timeline from the
mock's call log: the share of wall time the GPU was busy with the program's work, over a window
that leaves out the start (the bucket's burst) and the end (the last queued work).
"""

from __future__ import annotations

import bisect
import itertools
import time

import pytest

from xpushare.wire.protocol import FEATURE_QUOTAS, Limits, MessageType

from .harness import GIB, poll

# The tests of compute limits and of the lock's pauses judge the mock GPU's wall-clock time; those of
# settings and memory limits check messages and allocations only and share the machine.
timed = pytest.mark.exclusive

KERNEL_US = 1000
TOLERANCE = 0.04  # points of the GPU's time
OOM = 2


def _intervals(world, pid: int, kernel_us: int = KERNEL_US) -> list[tuple[int, int]]:
    """The program's GPU work on the modelled timeline (ns): as the mock queues it, each launch
    starts when it is made or when the work before it ends, whichever is later."""
    out, free = [], 0
    for e in sorted(world.log.entries(pid, fn="cuLaunchKernel"), key=lambda e: e["t0"]):
        if e.get("ret", 0) != 0:
            continue
        start = max(e["t0"], free)
        free = start + kernel_us * 1000
        out.append((start, free))
    return out


def _busy_fraction(iv, a: int, b: int) -> float:
    busy = sum(max(0, min(e, b) - max(s, a)) for s, e in iv)
    return busy / (b - a)


def _launch_window(iv, skip_s: float = 0.25) -> tuple[int, int]:
    """From skip_s after the first launch to the last launch's submission."""
    return iv[0][0] + int(skip_s * 1e9), max(s for s, _ in iv) - KERNEL_US * 1000


def _saturate(world, limit: str | None, seconds: float, env=None):
    """Back-to-back launches worth `seconds` of wall time at the limit; returns the GPU's busy
    fraction over the steady part."""
    frac = float(limit.rstrip("%")) / 100 if limit else 1.0
    n = int(seconds * frac * 1e6 / KERNEL_US)
    e = {"MOCK_CUDA_KERNEL_US": KERNEL_US, "NVSHARE_COMPUTE_LIMIT": limit}
    e.update(env or {})
    app = world.app("init", "ctx", "0", "launch", str(n), "ctxsync", env=e)
    assert app.finish(60) == 0, app.stderr()
    iv = _intervals(world, app.pid)
    assert len(iv) == n
    a, b = _launch_window(iv)
    got = _busy_fraction(iv, a, b)
    print(f"limit {limit}: busy fraction {got:.4f}")
    return got, app


@timed
@pytest.mark.parametrize("limit", ["25", "50", "75"])
def test_a_saturating_program_gets_its_limit(world, limit):
    world.scheduler(mode="auto")
    got, _ = _saturate(world, limit, 1.6)
    assert got == pytest.approx(int(limit) / 100, abs=TOLERANCE)


@timed
@pytest.mark.parametrize("how", ["ungated", "serial", "off"])
def test_the_limit_holds_in_every_mode_and_ungated(world, how):
    if how != "ungated":
        world.scheduler(mode=how)
    got, app = _saturate(world, "40%", 1.5)
    assert got == pytest.approx(0.40, abs=TOLERANCE)


BUCKET_MS_PER_POINT = 0.5   # quota.c: the bucket holds L x 50 ms
QUEUE_MS = 20               # checkpoint.c: what may be queued past the gate under a limit
SLACK_MS = 8                # the client thread's lateness on a loaded machine


def _busy_until(iv, done: list[int], t: int) -> int:
    """GPU time (ns) of the work before t; `done[i]`: that of iv[:i] (the intervals do not overlap:
    each starts when the one before it ends, or later)."""
    i = bisect.bisect_right(iv, (t, t))
    busy = done[i]
    if i and iv[i - 1][1] > t:
        busy -= iv[i - 1][1] - t
    return busy


def _worst_excess_ms(iv, frac: float) -> float:
    """The most GPU time any window (20 to 400 ms long, starting at a launch) holds beyond the
    limit's share of it. Prefix sums: 4000 launches made the plain sum take 50 s of a run in
    which no other test may start."""
    done = list(itertools.accumulate((e - s for s, e in iv), initial=0))
    end, worst = iv[-1][1], 0.0
    for k, (start, _) in enumerate(iv):
        for w_ms in (20, 50, 100, 200, 400):
            w = w_ms * 1_000_000
            if start + w <= end:
                busy = _busy_until(iv, done, start + w) - done[k]
                worst = max(worst, (busy / w - frac) * w / 1e6)
    return worst


@timed
@pytest.mark.parametrize("limit,kernel_us", [(25, KERNEL_US), (50, KERNEL_US), (25, 100)])
def test_no_window_holds_more_than_the_limit_plus_one_burst(world, limit, kernel_us):
    """The token bucket's bound: any window of W holds at most L x W of GPU time plus the bucket
    and the queue. The first work after a pause is charged as promptly as the rest (a recorded
    checkpoint wakes the client thread), so a burst never runs on for a slow retirement tick
    (which let 25% run 65 ms bursts); and the queue stays near its 20 ms with short kernels too
    (checkpoints spaced out once per ring of spans, not once per span: 100 us kernels queued
    100 ms, then paused for 400)."""
    world.scheduler(mode="auto")
    n = int(1.6 * limit / 100 * 1e6 / kernel_us)
    app = world.app("init", "ctx", "0", "launch", str(n), "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": kernel_us, "NVSHARE_COMPUTE_LIMIT": limit})
    assert app.finish(60) == 0, app.stderr()
    excess = _worst_excess_ms(_intervals(world, app.pid, kernel_us), limit / 100)
    assert excess <= limit * BUCKET_MS_PER_POINT + QUEUE_MS + SLACK_MS


@timed
def test_without_a_limit_the_program_saturates_the_gpu(world):
    world.scheduler(mode="auto")
    got, _ = _saturate(world, None, 0.8)
    assert got > 0.97


@timed
def test_short_pauses_keep_the_lock(world, recorder):
    """At 25% each pause is a few tens of ms, well under NVSHARE_IDLE_RELEASE_MS (250): the
    holder keeps the lock (no release and re-request at every pause)."""
    got, app = _saturate(world, "25", 1.2)
    assert got == pytest.approx(0.25, abs=TOLERANCE)
    assert len(recorder.messages(MessageType.REQ_LOCK)) == 1
    assert not recorder.messages(MessageType.LOCK_RELEASED)


@timed
def test_a_long_pause_gives_the_lock_up_and_asks_again_after_it(world, recorder):
    """At 2% a pause lasts about a second: the holder releases the lock (idle) for others and asks
    for it again only when its pause is over, not at once. Read from the client thread's own
    ordered lines (NVSHARE_DEBUG=2): after the idle release, the gate reopens before the next
    request."""
    app = world.app("init", "ctx", "0", "launch", "120", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": KERNEL_US, "NVSHARE_COMPUTE_LIMIT": "2",
                         "NVSHARE_IDLE_RELEASE_MS": 100, "MOCK_CUDA_LOG": None,
                         "NVSHARE_DEBUG": 2})
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, timeout=30)
    recorder.wait_count(MessageType.REQ_LOCK, 2, timeout=30)
    rel = recorder.messages(MessageType.LOCK_RELEASED)[0]
    assert rel.msg.reason == 1  # idle
    lines = app.stderr().splitlines()
    app.kill()
    released = next(i for i, ln in enumerate(lines) if "release device 0 (idle)" in ln)
    asked = next(i for i, ln in enumerate(lines) if i > released and "request device 0" in ln)
    assert any("gate reopened" in ln for ln in lines[released:asked]), \
        "asked again while still paused:\n" + "\n".join(lines[released:asked + 1])


def _limits_seen(app, n: int):
    poll(lambda: app.stderr().count("limits from the scheduler") >= n, 10,
         what=f"{n} LIMITS applied")


@timed
def test_limits_change_the_compute_limit_live(world, recorder):
    """LIMITS sets a compute limit on a running program, and 0 takes it away. The work queued
    before it (up to NVSHARE_DRAIN_TARGET_MS, 100 ms) is charged when it retires: the window
    leaves that transient out."""
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.app("init", "ctx", "0", "launch", "3000", "ctxsync",
                    env={"MOCK_CUDA_KERNEL_US": KERNEL_US, "NVSHARE_DEBUG": 1})
    recorder.wait_count(MessageType.SETTINGS, 1)
    _limits_seen(app, 1)
    time.sleep(1.2)
    recorder.limits(compute_limit=250)
    t_on = time.monotonic()
    _limits_seen(app, 2)
    time.sleep(2.0)
    recorder.limits(compute_limit=0)
    t_off = time.monotonic()
    _limits_seen(app, 3)
    assert app.finish(60) == 0
    iv = _intervals(world, app.pid)
    ns = lambda t: int(t * 1e9)  # noqa: E731
    before = _busy_fraction(iv, iv[0][0] + ns(0.1), ns(t_on))
    during = _busy_fraction(iv, ns(t_on + 0.6), ns(t_off))
    after = _busy_fraction(iv, ns(t_off + 0.1), max(s for s, _ in iv))
    print(f"live: before {before:.3f} during {during:.3f} after {after:.3f}")
    assert before > 0.95
    assert during == pytest.approx(0.25, abs=TOLERANCE)
    assert after > 0.95
    said = [ln.split("limits from the scheduler: ")[1] for ln in app.stderr().splitlines()
            if "limits from the scheduler" in ln]
    assert said == ["compute none, memory 0 bytes (none)", "compute 25.0%, memory 0 bytes (none)",
                    "compute none, memory 0 bytes (none)"], said


def test_settings_carry_the_environment(world, recorder):
    recorder.welcome_features = FEATURE_QUOTAS
    world.run("init", "ctx", "0", "launch", "1",
              env={"NVSHARE_COMPUTE_LIMIT": "50%", "NVSHARE_COMPUTE_SHARE": "0.5",
                   "NVSHARE_GPU_MEMORY_LIMIT": "2GiB"})
    types = [r.type for r in recorder.messages()]
    assert types[:3] == [MessageType.HELLO, MessageType.SETTINGS, MessageType.ATTACH], types
    (st,) = recorder.messages(MessageType.SETTINGS)
    assert (st.msg.compute_limit, st.msg.compute_share, st.msg.memory_limit) == (500, 500, 2 * GIB)
    assert [r.type for r in recorder.sent_messages()][:2] == [MessageType.WELCOME, MessageType.LIMITS]


def test_settings_of_an_unset_environment_are_zero(world, recorder):
    recorder.welcome_features = FEATURE_QUOTAS
    world.run("init", "ctx", "0", "launch", "1")
    (st,) = recorder.messages(MessageType.SETTINGS)
    assert (st.msg.compute_limit, st.msg.compute_share, st.msg.memory_limit) == (0, 0, 0)


def test_no_settings_to_a_scheduler_without_quotas(world, recorder):
    world.run("init", "ctx", "0", "launch", "1", env={"NVSHARE_COMPUTE_LIMIT": "50"})
    assert recorder.messages(MessageType.ATTACH)
    assert not recorder.messages(MessageType.SETTINGS)


def _allocs(app):
    return [s["ret"] for s in app.steps("alloc")]


def test_a_lower_memory_limit_takes_nothing_away_but_stops_allocations(world, recorder):
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.app("init", "ctx", "0", "alloc", "3G", "alloc", "2G", "meminfo", "pause",
                    "meminfo", "alloc", "1M", "free", "last", "meminfo", "alloc", "1G", "alloc", "1G",
                    env={"NVSHARE_GPU_MEMORY_LIMIT": "4G", "NVSHARE_CONTEXT_RESERVE": 0,
                         "NVSHARE_DEBUG": 1})
    app.paused(timeout=30)
    recorder.limits(memory_limit=2 * GIB)
    _limits_seen(app, 2)  # the answer to SETTINGS, then this one
    app.resume()
    assert app.finish(30) == 0
    # 3G held; 2G more is over the environment's 4G; after LIMITS 2G: 1M is refused (3G held),
    # the 3G freed, 1G fits, a second 1G fits (2G), nothing more would
    assert _allocs(app) == [0, OOM, OOM, 0, 0]
    totals = [s["total"] for s in app.steps("meminfo")]
    assert totals == [4 * GIB, 2 * GIB, 2 * GIB]
    warnings = [ln for ln in app.stderr().splitlines() if ": warning: " in ln]
    assert len(warnings) == 2, warnings  # once per limit
    # the answer to SETTINGS carried the environment's 4G back: still the environment's limit
    assert "holds 3.00 GiB there and may hold 4.00 GiB (NVSHARE_GPU_MEMORY_LIMIT" in warnings[0]
    assert "this process holds 3.00 GiB there and may hold 2.00 GiB (the memory limit the " \
           "scheduler set for this process)" in warnings[1]


def test_removing_the_memory_limit_restores_the_capacity(world, recorder):
    recorder.welcome_features = FEATURE_QUOTAS
    recorder.limits_reply = Limits(memory_limit=1 * GIB)
    app = world.app("init", "ctx", "0", "alloc", "2G", "pause", "alloc", "2G", "meminfo",
                    env={"NVSHARE_CONTEXT_RESERVE": 0, "NVSHARE_DEBUG": 1,
                         "MOCK_CUDA_TOTAL_MEM": "16G"})
    app.paused(timeout=30)
    recorder.limits(memory_limit=0)
    _limits_seen(app, 2)
    app.resume()
    assert app.finish(30) == 0
    assert _allocs(app) == [OOM, 0]
    assert app.steps("meminfo")[0]["total"] == 16 * GIB


def test_the_view_takes_the_limit_from_limits_before_anything_is_allocated(world, recorder):
    recorder.welcome_features = FEATURE_QUOTAS
    recorder.limits_reply = Limits(memory_limit=3 * GIB)
    app = world.run("init", "ctx", "0", "meminfo", env={"NVSHARE_CONTEXT_RESERVE": 0,
                                                       "NVSHARE_GPU_MEMORY_LIMIT": "5G"})
    (m,) = app.steps("meminfo")
    assert (m["total"], m["free"]) == (3 * GIB, 3 * GIB)


def test_nvml_view_follows_the_limit_from_limits(world, artifacts, recorder):
    """nvs_dev_view is shared by cuMemGetInfo and NVML: both report the limit LIMITS set."""
    from .test_nvml import run_nvml_app, steps_named
    recorder.welcome_features = FEATURE_QUOTAS
    recorder.limits_reply = Limits(memory_limit=3 * GIB)
    lines = run_nvml_app(world, artifacts, "ctx", 0, "meminfo", "nvml", 0,
                         NVSHARE_GPU_MEMORY_LIMIT="5GiB", NVSHARE_CONTEXT_RESERVE=0)
    (cu,) = steps_named(lines, "meminfo")
    (nv,) = steps_named(lines, "nvml")
    assert cu["total"] == 3 * GIB
    assert (nv["total1"], nv["total2"]) == (3 * GIB, 3 * GIB), nv


def test_a_welcome_without_quotas_brings_back_the_environment(world, recorder):
    recorder.welcome_features = 0
    app = world.run("init", "ctx", "0", "meminfo", env={"NVSHARE_CONTEXT_RESERVE": 0,
                                                       "NVSHARE_GPU_MEMORY_LIMIT": "5G"})
    assert app.steps("meminfo")[0]["total"] == 5 * GIB
