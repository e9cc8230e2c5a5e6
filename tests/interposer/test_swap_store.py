"""The swap store (native/src/swap/swapstore.c): converted allocations leave the GPU as a copy into a
pinned host copy plus a discard of the range, and come back as a populate of the range plus a copy
back, before any of the application's work runs; the program's own managed memory moves with the
driver's prefetch. The mock driver overwrites a discarded range with 0xDB, as the real one may hand
back anything there, so data read back intact proves it was restored.

The fake scheduler (fake_scheduler.py) offers SWAP, drops with EVICT, sends EVICT to an idle
client, and records RESIDENCY; the mock logs every call with CLOCK_MONOTONIC times.
"""

from __future__ import annotations


import pytest

from xpushare.wire.protocol import (
    FEATURE_SWAP, HELLO_SWAP, RESIDENCY_ANSWER, RESIDENCY_REFUSED, MessageType,
)

from testkit.waiting import poll

from .harness import build_mock_variant
from .swap_steps import drop, idle_env, ours, pins, residency, unpins

# Managed memory's paths (the backing kept for oversubscription); device memory of the library's
# own is tests/interposer/test_swap_vmm.py's.
pytestmark = pytest.mark.managed_backing

HOST, DEVICE = 2, 1  # the mock log's loc_type
MIB = 1 << 20


_env, _ours, _residency, _drop = idle_env, ours, residency, drop


def _prefetches(log, pid, loc_type) -> list[tuple[int, int]]:
    return [(e["ptr"], e["size"]) for e in log.entries(pid, "cuMemPrefetchAsync_v2")
            if e["loc_type"] == loc_type]


def _pinned(world, app, size) -> dict:
    """The pinned host copy of `size` bytes our own thread made (waited for: it pins in the
    background)."""
    found = poll(lambda: [e for e in pins(world.log, app) if e["size"] == size],
                 what=lambda: f"a host copy of {size} bytes (log: {world.log.entries(app.pid)[-5:]})")
    return found[0]


def _swapped_out_by_a_drop(world, recorder, *steps, env=None, store=True):
    """An app with 2M of its own managed memory and 1M converted (filled), holding the lock and
    paused, dropped with EVICT twice: the first swap-out moves both by the driver's prefetch while
    the converted range's host copy is pinned in the background; once it is, the app runs again and
    the second drop goes through the swap store (store=False: a run without it, nothing to wait
    for). Then `steps` run when resumed. Returns the app."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "managed", "2M", "alloc", "1M", "fill", 1, "launch", 1, "pause",
                    "launch", 1, "pause", *steps, env=_env(**(env or {})))
    app.paused()
    _drop(recorder, 1)
    if store:
        _pinned(world, app, MIB)
    app.resume()
    app.paused(nth=2)
    _drop(recorder, 2)
    return app


def test_the_first_swap_out_moves_by_prefetch_and_pins_the_host_copy_meanwhile(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "managed", "2M", "alloc", "1M", "fill", 1, "launch", 1, "pause",
                    "check", 1, env=_env())
    app.paused()
    _drop(recorder, 1)
    log = world.log
    (managed, converted) = [(ln["ptr"], ln["size"]) for ln in app.lines
                            if ln.get("step") in ("managed", "alloc")]
    assert sorted(_prefetches(log, app.pid, HOST)) == sorted([managed, converted])
    assert log.entries(app.pid, "cuMemDiscardBatchAsync") == [], "nothing to discard: no host copy yet"
    (first,) = _residency(recorder)
    assert (first.resident_bytes, first.host_bytes, first.flags) == (0, 3 * MIB, 0)
    pinned = _pinned(world, app, MIB)
    (released,) = recorder.messages(MessageType.LOCK_RELEASED)
    assert pinned["ret"] == 0 and pinned["flags"] == 1, "portable pinned memory"
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    assert released.msg.evict_us > 0


def test_a_drop_swaps_converted_memory_out_at_copy_speed_and_back_before_any_work(world, recorder):
    app = _swapped_out_by_a_drop(world, recorder, "check", 1, "launch", 1)
    log = world.log
    (hello,) = recorder.messages(MessageType.HELLO)
    assert hello.msg.flags & HELLO_SWAP, "the client offers to answer EVICT"
    (managed, converted) = [(ln["ptr"], ln["size"]) for ln in app.lines
                            if ln.get("step") in ("managed", "alloc")]
    released = recorder.messages(MessageType.LOCK_RELEASED)[1]

    # out: the converted range copied into its pinned host copy, then discarded; before the release
    pinned = _pinned(world, app, converted[1])
    (out,) = [o for o in _ours(log, app, "cuMemcpyDtoHAsync_v2") if o["bytes"] == converted[1]]
    assert out["ret"] == 0 and out["t0"] > pinned["t1"]
    (gone,) = log.entries(app.pid, "cuMemDiscardBatchAsync")
    assert (gone["ptr"], gone["size"]) == converted and gone["ret"] == 0
    assert out["t1"] <= gone["t0"] and gone["t1"] <= released.at_ns
    assert gone["stream"] != out["stream"], "discards on the second stream"
    # the program's own managed memory: the driver's prefetch to the host, never discarded
    assert _prefetches(log, app.pid, HOST)[-1] == managed

    # RESIDENCY right before LOCK_RELEASED: nothing left on the GPU, 3 MiB in host memory
    second = _residency(recorder)[-1]
    assert (second.resident_bytes, second.host_bytes) == (0, 3 * MIB) and second.flags == 0
    assert second.move_us > 0

    app.resume()  # "check" reads the converted range: a grant (without PREFETCH) swaps it in first
    assert app.finish() == 0
    (check,) = app.steps("check")
    assert check["ok"] == 1, "the bytes came back (the mock scribbled over the discarded range)"
    (back,) = _ours(log, app, "cuMemcpyHtoDAsync_v2")
    populate = [e for e in log.entries(app.pid, "cuMemPrefetchAsync_v2")
                if e["loc_type"] == DEVICE and (e["ptr"], e["size"]) == converted]
    assert populate and populate[-1]["t1"] <= back["t0"], "populated before the copy back"
    (read,) = log.entries(app.pid, "cuMemcpyDtoH_v2")
    assert back["t1"] <= read["t0"], "swapped in before the application's first call"
    last = _residency(recorder)[-1]
    assert (last.resident_bytes, last.host_bytes) == (3 * MIB, 0)
    assert recorder.errors == []


def test_the_debug_lines_say_what_moved_as_the_swap_benchmark_reads_them(world, recorder):
    """bench/switching/swap.py attributes each request's moves from these lines: the bytes out (and how many
    of them were copied), the bytes back, and the milliseconds of each."""
    from bench.switching import swap as bench_swap

    app = _swapped_out_by_a_drop(world, recorder, "check", 1, env={"NVSHARE_DEBUG": 1})
    app.resume()
    assert app.finish() == 0
    text = app.stderr()
    moves = [tuple(int(x) for x in m[:3]) for m in bench_swap.EVICTED.findall(text)]
    assert moves == [(0, 0, 3 * MIB), (MIB, 0, 2 * MIB)], "first by prefetch, then the swap store"
    back = [int(b) for b, _, _ in bench_swap.SWAPPED_IN.findall(text)]
    assert back[-1] == MIB


def test_an_idle_client_evicts_when_asked_and_answers(world, recorder):
    """EVICT to a client that released the lock (idle) while its application is blocked in other
    code (paused): it moves the memory out, answers RESIDENCY(ANSWER); its next work swaps in."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "4M", "fill", 1, "launch", 1, "pause", "check", 1,
                    env=_env(NVSHARE_IDLE_RELEASE_MS=30))
    app.paused()
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)  # released for idleness
    recorder.evict(0)
    recorder.wait_count(MessageType.RESIDENCY, 1, device=0)
    (answer,) = _residency(recorder)
    assert answer.flags == RESIDENCY_ANSWER
    assert (answer.resident_bytes, answer.host_bytes) == (0, 4 * MIB)
    assert [size for _, size in _prefetches(world.log, app.pid, HOST)] == [4 * MIB]
    _pinned(world, app, 4 * MIB)  # the next swap-out goes through the swap store
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    assert recorder.errors == []


def test_a_client_holding_the_lock_answers_evict_with_nothing_moved(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", env=_env())
    app.paused()
    recorder.wait_count(MessageType.REQ_LOCK, 1, device=0)
    recorder.evict(0)
    recorder.wait_count(MessageType.RESIDENCY, 1, device=0)
    (answer,) = _residency(recorder)
    assert answer.flags == RESIDENCY_ANSWER and answer.resident_bytes == MIB
    assert world.log.entries(app.pid, "cuMemDiscardBatchAsync") == []
    app.resume()
    assert app.finish() == 0


def test_past_the_host_swap_limit_the_memory_stays_and_the_scheduler_hears_refused(world, recorder):
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "1M", "fill", 1, "alloc", "3M", "fill", 1, "launch", 1,
                    "pause", "check", 1, env=_env(NVSHARE_IDLE_RELEASE_MS=30,
                                               NVSHARE_HOST_SWAP_LIMIT="2MiB"))
    app.paused()
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    recorder.evict(0)
    recorder.wait_count(MessageType.RESIDENCY, 1, device=0)
    (answer,) = _residency(recorder)
    assert answer.flags == RESIDENCY_ANSWER | RESIDENCY_REFUSED
    assert (answer.resident_bytes, answer.host_bytes) == (3 * MIB, MIB), "the 1M fits, the 3M not"
    assert [size for _, size in _prefetches(world.log, app.pid, HOST)] == [MIB]
    _pinned(world, app, MIB)
    assert [e["size"] for e in pins(world.log, app)] == [MIB], "never the 3M"
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_HOST_SWAP_LIMIT" in ln]
    assert len(warnings) == 1 and "stays on the GPU" in warnings[0], app.stderr()


def test_swapped_out_when_the_scheduler_goes_the_memory_comes_back_before_running_ungated(
        world, recorder):
    app = _swapped_out_by_a_drop(world, recorder, "check", 1)
    recorder.hang_up()
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    log = world.log
    (back,) = _ours(log, app, "cuMemcpyHtoDAsync_v2")
    (read,) = log.entries(app.pid, "cuMemcpyDtoH_v2")
    assert back["t1"] <= read["t0"]


def test_a_free_while_swapped_out_lets_the_host_copy_go_and_nothing_comes_back(world, recorder):
    app = _swapped_out_by_a_drop(world, recorder, "free", "last", "launch", 1)
    app.resume()
    assert app.finish() == 0
    log = world.log
    (pinned,) = pins(log, app)
    assert [e["ptr"] for e in unpins(log, app)] == [pinned["ptr"]]
    assert _ours(log, app, "cuMemcpyHtoDAsync_v2") == [], "a freed range is not swapped in"
    footprints = [r.footprint for r in recorder.messages(MessageType.MEM_UPDATE)]
    assert footprints[-1] == (2 * MIB, 0), "the scheduler hears the smaller footprint"


def test_swap_off_moves_converted_memory_with_the_drivers_prefetch(world, recorder):
    app = _swapped_out_by_a_drop(world, recorder, "check", 1, env={"NVSHARE_SWAP": "off"}, store=False)
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    log = world.log
    assert log.entries(app.pid, "cuMemDiscardBatchAsync") == []
    assert pins(log, app) == []
    to_host = [e for e in log.entries(app.pid, "cuMemPrefetchAsync_v2") if e["loc_type"] == HOST]
    assert len(to_host) == 4, "both ranges at both drops, by the driver's migration"


def test_memory_not_written_since_it_came_back_is_discarded_without_a_copy(world, recorder):
    """Through the swap store (the second swap-out), back, out again unwritten: the checksum kernel
    finds the host copy still valid, so that swap-out discards and copies nothing, and only after
    its release went out; written in between (fill 2), the next copies again; every time the data
    comes back right."""
    app = _swapped_out_by_a_drop(world, recorder, "check", 1, "pause", "fill", 2, "pause", "check", 2,
                                 env={"NVSHARE_DEBUG": 1})
    for n in (3, 4):
        app.resume()
        app.paused(nth=n)
        _drop(recorder, n)
    app.resume()
    assert app.finish() == 0
    assert [c["ok"] for c in app.steps("check")] == [1, 1]
    log = world.log
    copies = sorted(o["t0"] for o in _ours(log, app, "cuMemcpyDtoHAsync_v2") if o["bytes"] == MIB)
    discards = log.entries(app.pid, "cuMemDiscardBatchAsync")
    assert len(discards) == 3 and len(copies) == 2, (copies, discards)
    assert copies[0] < discards[0]["t0"] and discards[1]["t0"] < copies[1] < discards[2]["t0"], \
        "copied at the swap store's first and third swap-outs, not the second"
    released = recorder.messages(MessageType.LOCK_RELEASED)
    assert discards[0]["t1"] <= released[1].at_ns and discards[2]["t1"] <= released[3].at_ns
    lines = [ln for ln in app.stderr().splitlines() if "release device 0" in ln or "discards of" in ln]
    assert [("discards" in ln) for ln in lines] == [False, False, False, True, False], \
        "a clean range is discarded after its release went out: the next holder's move overlaps it"
    sums = [e for e in log.entries(app.pid, "cuLaunchKernel") if e["tid"] not in {ln["tid"] for ln in app.lines}]
    assert len(sums) == 3, "one checksum per swap-out of a range with a host copy"
    assert [r.host_bytes for r in _residency(recorder) if r.resident_bytes == 0] == [3 * MIB] * 4


@pytest.fixture(scope="module")
def no_discard_driver(tmp_path_factory):
    return build_mock_variant(tmp_path_factory.mktemp("mock-nodiscard"), "MOCK_CUDA_NO_DISCARD")


def test_a_driver_without_discard_falls_back_to_the_prefetch(world, recorder, no_discard_driver):
    app = _swapped_out_by_a_drop(world, recorder, "check", 1,
                                 env={"LD_LIBRARY_PATH": no_discard_driver}, store=False)
    app.resume()
    assert app.finish() == 0
    assert app.steps("check")[0]["ok"] == 1
    assert pins(world.log, app) == []


def test_ranges_that_fit_one_by_one_do_not_pass_the_limit_together(world, recorder):
    """Three 1M ranges under a 2 MiB limit: the swap-out admits two and leaves the third on the GPU
    (each alone would fit), and only the two admitted get host copies."""
    recorder.welcome_features = FEATURE_SWAP
    app = world.app("init", "ctx", 0, "alloc", "1M", "alloc", "1M", "alloc", "1M", "launch", 1,
                    "pause", env=_env(NVSHARE_IDLE_RELEASE_MS=30, NVSHARE_HOST_SWAP_LIMIT="2MiB"))
    app.paused()
    recorder.wait_count(MessageType.LOCK_RELEASED, 1, device=0)
    recorder.evict(0)
    recorder.wait_count(MessageType.RESIDENCY, 1, device=0)
    (answer,) = _residency(recorder)
    assert answer.flags == RESIDENCY_ANSWER | RESIDENCY_REFUSED
    assert (answer.resident_bytes, answer.host_bytes) == (MIB, 2 * MIB)
    _pinned(world, app, MIB)
    poll(lambda: len(pins(world.log, app)) >= 2, what="two host copies")
    app.resume()
    assert app.finish() == 0
    assert [e["size"] for e in pins(world.log, app)] == [MIB, MIB]
