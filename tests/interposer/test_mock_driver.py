"""The instrument itself: the mock driver behaves as documented in tests/mock/cuda/README.md when no
interposer is loaded. Every other test relies on these behaviours to catch the interposer."""

import json
import subprocess
import sys

import pytest

from .harness import GIB, MIB, clean_env

OOM, INVALID_VALUE, INVALID_HANDLE, CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED = 2, 1, 400, 900, 901


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


FOUND_BY_GPA = {"cuMemHostAlloc": "cuMemHostAlloc", "cuMemFreeHost": "cuMemFreeHost",
                "cuMemHostRegister": "cuMemHostRegister_v2", "cuMemHostUnregister": "cuMemHostUnregister",
                "cuStreamWaitEvent": "cuStreamWaitEvent", "cuMemDiscardBatchAsync": "cuMemDiscardBatchAsync",
                "cuModuleLoadData": "cuModuleLoadData", "cuModuleGetFunction": "cuModuleGetFunction",
                **{f"cuCheckpointProcess{s}": f"cuCheckpointProcess{s}"
                   for s in ("Lock", "Checkpoint", "Restore", "Unlock", "GetState")}}


def test_get_proc_address_finds_every_exported_function_the_runtime_may_ask_for(world):
    steps = [x for name in FOUND_BY_GPA for x in ("lookup", name)]
    found = run(world, "init", *steps, lookup="gpa2", cuda_version=13000).steps("lookup")
    assert {f["name"]: (f["ret"], f["sym"]) for f in found} == {n: (0, s) for n, s in FOUND_BY_GPA.items()}


def test_visible_devices_and_uuids(world):
    app = run(world, "init", "ctx", 0, "alloc", "1M", "totalmem", 0,
              env={"MOCK_CUDA_DEVICES": 3, "CUDA_VISIBLE_DEVICES": "2,0", "MOCK_CUDA_TOTAL_MEM": "4G"})
    assert app.wait_step("totalmem")["total"] == 4 * GIB
    assert world.log.entries(app.pid, "cuMemAlloc_v2")[0]["size"] == MIB
    bad = run(world, "init", env={"MOCK_CUDA_DEVICES": 1, "CUDA_VISIBLE_DEVICES": "1"})
    assert bad.wait_step("init")["ret"] == 100, "no visible device: CUDA_ERROR_NO_DEVICE"


# ------------------------------------------------------------------------------------------------
# prefetch and event timing (fast switches, bounded drain): driven in a child Python with ctypes

_DRIVER_SCRIPT = r"""
import ctypes as C, json, sys
cu = C.CDLL(sys.argv[1])
class Loc(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]
cu.cuMemPrefetchAsync_v2.argtypes = [C.c_ulonglong, C.c_size_t, Loc, C.c_uint, C.c_void_p]
cu.cuMemPrefetchAsync.argtypes = [C.c_ulonglong, C.c_size_t, C.c_int, C.c_void_p]
out = {}
ctx, dev, managed, plain, stream = C.c_void_p(), C.c_ulonglong(), C.c_ulonglong(), C.c_ulonglong(), C.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(C.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAllocManaged(C.byref(managed), 1 << 20, 1) == 0
assert cu.cuMemAlloc_v2(C.byref(plain), 1 << 20) == 0
out["stream"] = cu.cuStreamCreate(C.byref(stream), 1)
out["to_host"] = cu.cuMemPrefetchAsync_v2(managed.value, 1 << 20, Loc(2, 0), 0, stream)
out["to_device"] = cu.cuMemPrefetchAsync(managed.value, 1 << 20, 0, stream)
out["old_to_host"] = cu.cuMemPrefetchAsync(managed.value + 4096, 4096, -1, stream)
out["not_managed"] = cu.cuMemPrefetchAsync_v2(plain.value, 1 << 20, Loc(1, 0), 0, stream)
out["bad_device"] = cu.cuMemPrefetchAsync_v2(managed.value, 1 << 20, Loc(1, 7), 0, stream)
a, b, untimed, ms = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_float()
cu.cuEventCreate(C.byref(a), 0); cu.cuEventCreate(C.byref(b), 0); cu.cuEventCreate(C.byref(untimed), 2)
out["unrecorded"] = cu.cuEventElapsedTime_v2(C.byref(ms), a, b)
for e in (a, b, untimed):
    cu.cuEventRecord(e, stream)
out["elapsed"] = cu.cuEventElapsedTime_v2(C.byref(ms), a, b)
out["ms"] = ms.value
out["untimed"] = cu.cuEventElapsedTime(C.byref(ms), a, untimed)
print(json.dumps(out))
"""


def _drive(world, **env):
    """Run _DRIVER_SCRIPT against the mock (no interposer); its results as a dict."""
    e = clean_env(MOCK_CUDA_LOG=world.log.path, **env)
    r = subprocess.run([sys.executable, "-c", _DRIVER_SCRIPT, str(world.artifacts.libcuda)],
                       capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_prefetch_accepts_managed_memory_only_and_logs_the_destination(world):
    out = _drive(world, MOCK_CUDA_PREFETCH_US=20_000)
    assert (out["stream"], out["to_host"], out["to_device"], out["old_to_host"]) == (0, 0, 0, 0)
    assert (out["not_managed"], out["bad_device"]) == (INVALID_VALUE, 101)
    moves = [(e["fn"], e["loc_type"], e["loc_id"], e["ret"], "error" in e)
             for e in world.log.entries() if e["fn"].startswith("cuMemPrefetchAsync")]
    assert moves == [("cuMemPrefetchAsync_v2", 2, 0, 0, False), ("cuMemPrefetchAsync", 1, 0, 0, False),
                     ("cuMemPrefetchAsync", 2, -1, 0, False), ("cuMemPrefetchAsync_v2", 1, 0, 1, True),
                     ("cuMemPrefetchAsync_v2", 1, 7, 101, True)]
    accepted = [e for e in world.log.entries() if e["fn"].startswith("cuMemPrefetchAsync") and e["ret"] == 0]
    assert all(e["t1"] - e["t0"] >= 20_000_000 for e in accepted), "MOCK_CUDA_PREFETCH_US"
    (created,) = world.log.entries(fn="cuStreamCreate")
    assert created["flags"] == 1


def test_event_elapsed_time_needs_recorded_timing_events_and_is_configurable(world, tmp_path):
    out = _drive(world, MOCK_CUDA_EVENT_SPAN_MS=42.5)
    assert (out["unrecorded"], out["elapsed"], out["untimed"]) == (INVALID_HANDLE, 0, INVALID_HANDLE)
    assert out["ms"] == pytest.approx(42.5)
    span = tmp_path / "span"
    span.write_text("7.25\n")
    assert _drive(world, MOCK_CUDA_EVENT_SPAN_MS=42.5, MOCK_CUDA_EVENT_SPAN_FILE=span)["ms"] == pytest.approx(7.25)
    host = _drive(world)["ms"]  # no setting: the host time between the records, small here
    assert 0 <= host < 1000
