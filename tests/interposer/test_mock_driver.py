"""The instrument itself: the mock driver behaves as documented in tests/mock/mock_cuda.c when no
interposer is loaded. Every other test relies on these behaviours to catch the interposer."""

import pytest

from .harness import GIB, MIB

OOM, INVALID_VALUE, CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED = 2, 1, 900, 901


def run(world, *steps, **kw):
    return world.run(*steps, preload=False, **kw)


@pytest.fixture
def world(bare_world):
    return bare_world


def test_device_allocations_count_and_run_out(world):
    app = run(world, "init", "ctx", 0, "alloc", "10G", "alloc", "10G", "managed", "10G", "meminfo",
              "free", 0, "meminfo")
    assert [s["ret"] for s in app.steps("alloc")] == [0, OOM]
    assert app.wait_step("managed")["ret"] == 0, "managed memory may exceed the device"
    full, after = app.steps("meminfo")
    assert (full["free"], full["total"]) == (0, 16 * GIB)
    assert after["free"] == 16 * GIB - 10 * GIB
    kinds = [(e["fn"], e["kind"], e["ret"]) for e in world.log.entries(app.pid) if "kind" in e]
    assert kinds == [("cuMemAlloc_v2", "device", 0), ("cuMemAlloc_v2", "device", OOM),
                     ("cuMemAllocManaged", "managed", 0), ("cuMemFree_v2", "device", 0)]


def test_free_async_of_managed_memory_is_an_error(world):
    app = run(world, "init", "ctx", 0, "managed", "1M", "freeasync", "last", "free", "last")
    assert app.wait_step("freeasync")["ret"] == INVALID_VALUE
    assert app.wait_step("free")["ret"] == 0
    (err,) = world.log.errors(app.pid)
    assert err["fn"] == "cuMemFreeAsync"


def test_pitch_and_async_kinds(world):
    app = run(world, "init", "ctx", 0, "stream", "allocpitch", 100, 3, 4, "allocasync", "1M",
              "allocpool", "1M", "verify")
    assert app.wait_step("allocpitch")["pitch"] == 512
    assert app.wait_step("verify")["ok"] == 1
    assert [e["kind"] for e in world.log.entries(app.pid) if "kind" in e] == ["pitch", "async", "pool"]


def test_unsafe_call_during_global_capture_invalidates_it(world):
    app = run(world, "init", "ctx", 0, "stream", "capture-begin", "global", "launch", 2,
              "thread", "{", "ctx", 0, "ctxsync", "}", "join", "capture-end")
    assert app.wait_step("ctxsync")["ret"] == CAPTURE_UNSUPPORTED
    assert app.wait_step("capture-end")["ret"] == CAPTURE_INVALIDATED


def test_ctx_synchronize_in_relaxed_mode_still_invalidates_another_threads_global_capture(world):
    """As measured on an H200: relaxed mode does not make cuCtxSynchronize legal during another
    thread's global-mode capture; it is refused and the capture is invalidated."""
    app = run(world, "init", "ctx", 0, "stream", "capture-begin", "global", "launch", 2,
              "thread", "{", "ctx", 0, "capmode", "relaxed", "ctxsync", "}", "join", "capture-end")
    assert app.wait_step("ctxsync")["ret"] == CAPTURE_UNSUPPORTED
    assert app.wait_step("capture-end")["ret"] == CAPTURE_INVALIDATED


@pytest.mark.parametrize("capture_mode, thread_mode, call", [
    ("global", "relaxed", ["alloc", "1M"]),  # relaxed mode: other unsafe calls are allowed
    ("thread", "global", ["ctxsync"]), ("relaxed", "global", ["ctxsync"])])
def test_unsafe_call_is_allowed_when_relaxed_or_not_global(world, capture_mode, thread_mode, call):
    app = run(world, "init", "ctx", 0, "stream", "capture-begin", capture_mode, "launch", 2,
              "thread", "{", "ctx", 0, "capmode", thread_mode, *call, "}", "join", "capture-end",
              "graph-launch")
    assert app.wait_step(call[0])["ret"] == 0
    assert app.wait_step("capture-end")["ret"] == 0
    assert app.wait_step("graph-launch")["ret"] == 0
    assert [e.get("captured") for e in world.log.work(app.pid)] == [None], "only the graph launch ran"


@pytest.mark.parametrize("begin, ptds, expected", [
    (["capture-begin-v1"], False, "cuStreamBeginCapture"),
    (["capture-begin-v1"], True, "cuStreamBeginCapture_ptsz"),
    (["capture-begin-tograph", "global"], False, "cuStreamBeginCaptureToGraph"),
    (["capture-begin-tograph", "global"], True, "cuStreamBeginCaptureToGraph_ptsz")])
def test_other_capture_begins_are_global_captures(world, begin, ptds, expected):
    app = run(world, "init", "ctx", 0, "stream", *begin, "launch", 2,
              "thread", "{", "ctx", 0, "ctxsync", "}", "join", "capture-end", ptds=ptds)
    assert app.wait_step(begin[0])["ret"] == 0
    assert [e["ret"] for e in world.log.entries(app.pid, expected)] == [0]
    assert app.wait_step("ctxsync")["ret"] == CAPTURE_UNSUPPORTED
    assert app.wait_step("capture-end")["ret"] == CAPTURE_INVALIDATED


def test_capture_to_graph_ends_with_the_given_graph(world):
    app = run(world, "init", "ctx", 0, "stream", "capture-begin-tograph", "relaxed", "launch", 3,
              "is-capturing", "capture-end", "graph-launch")
    begin = app.wait_step("capture-begin-tograph")
    assert begin["ret"] == 0
    assert app.wait_step("is-capturing")["status"] == 1
    end = app.wait_step("capture-end")
    assert (end["ret"], end["graph"]) == (0, begin["graph"])
    assert app.wait_step("graph-launch")["ret"] == 0
    assert world.log.entries(app.pid, "cuStreamEndCapture")[0]["nodes"] == 3


def test_capture_queries_and_mode_exchanges_are_logged(world):
    app = run(world, "init", "ctx", 0, "stream", "is-capturing", "capmode", "relaxed")
    assert [(e["ret"], e["status"]) for e in world.log.entries(app.pid, "cuStreamIsCapturing")] == [(0, 0)]
    (xchg,) = world.log.entries(app.pid, "cuThreadExchangeStreamCaptureMode")
    assert (xchg["ret"], xchg["mode"], xchg["previous"]) == (0, 2, 0)


def test_gated_calls_are_logged_with_intervals(world):
    app = run(world, "init", "ctx", 0, "alloc", "64K", "gated-all", env={"MOCK_CUDA_WORK_US": 1000})
    work = world.log.work(app.pid)
    assert len(work) == len(app.wait_step("gated-all")["rets"])
    assert all(e["t1"] - e["t0"] >= 1_000_000 and e["dev"] == 0 for e in work)


@pytest.mark.parametrize("lookup, ptds, version, expected", [
    ("gpa2", False, 13000, "cuLaunchKernel"), ("gpa2", True, 13000, "cuLaunchKernel_ptsz"),
    ("gpa", True, 11000, "cuLaunchKernel_ptsz")])
def test_get_proc_address_hands_out_variants(world, lookup, ptds, version, expected):
    app = run(world, "init", "ctx", 0, "launch", 1, "resolve", "cuMemAlloc", "resolve", "cuStreamBatchMemOp",
              lookup=lookup, ptds=ptds, cuda_version=version)
    assert [e["fn"] for e in world.log.work(app.pid)] == [expected]
    alloc, batch = app.steps("resolve")
    assert alloc["sym"] == "cuMemAlloc_v2"
    assert batch["sym"] == ("cuStreamBatchMemOp_v2" if version >= 11070 else "cuStreamBatchMemOp") + \
        ("_ptsz" if ptds else "")


def test_visible_devices_and_uuids(world):
    app = run(world, "init", "ctx", 0, "alloc", "1M", "totalmem", 0,
              env={"MOCK_CUDA_DEVICES": 3, "CUDA_VISIBLE_DEVICES": "2,0", "MOCK_CUDA_TOTAL_MEM": "4G"})
    assert app.wait_step("totalmem")["total"] == 4 * GIB
    assert world.log.entries(app.pid, "cuMemAlloc_v2")[0]["size"] == MIB
    bad = run(world, "init", env={"MOCK_CUDA_DEVICES": 1, "CUDA_VISIBLE_DEVICES": "1"})
    assert bad.wait_step("init")["ret"] == 100, "no visible device: CUDA_ERROR_NO_DEVICE"
