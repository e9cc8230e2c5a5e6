"""Every way a program reaches the driver ends at the interposer's wrapper of the right variant.

Lookup paths (cuda_app --lookup): linked symbols, dlsym@GLIBC_2.34, dlsym@GLIBC_2.2.5,
cuGetProcAddress (v1), and cuGetProcAddress_v2 obtained the way the CUDA runtime does; each with
and without the per-thread default stream (_ptsz/_ptds names, or flags=2).
"""

import json
import time

import pytest

from .harness import poll
from .hooks_table import app_gated_table

LOOKUPS = ["linked", "dlsym", "dlsym-old", "gpa", "gpa2"]
LIB = "libnvshare.so"
DRIVER = "libcuda.so.1"
GATED = app_gated_table()  # (slot, legacy name, per-thread name)


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
@pytest.mark.parametrize("ptds", [False, True], ids=["legacy", "ptds"])
@pytest.mark.parametrize("lookup", LOOKUPS)
def test_lookup_path_is_intercepted(world, lookup, ptds):
    sched = world.scheduler(mode="serial")
    app = world.app("init", "ctx", 0, "resolve", "cuMemAlloc", "resolve", "cuLaunchKernel",
                    "resolve", "cuDeviceGetName", "alloc", "1M", "launch", 1, "pause",
                    lookup=lookup, ptds=ptds, env={"NVSHARE_IDLE_RELEASE_MS": 60000})
    app.paused()
    alloc_fn, launch_fn, other_fn = app.steps("resolve")
    assert alloc_fn["lib"] == LIB, "cuMemAlloc must resolve to the interposer"
    assert launch_fn["lib"] == LIB, "cuLaunchKernel must resolve to the interposer"
    assert other_fn["lib"] == DRIVER, "an entry point that is not hooked stays the driver's"
    # the launch was gated: the process asked for (and holds) the lock
    sched.wait_holder(app.pid)
    app.resume()
    assert app.finish() == 0
    assert [e["flags"] for e in world.log.entries(app.pid, "cuMemAllocManaged")] == [1]
    launched = [e["fn"] for e in world.log.work(app.pid)]
    assert launched == ["cuLaunchKernel_ptsz" if ptds else "cuLaunchKernel"], \
        "the wrapper must call the real function of the same variant"


@pytest.mark.parametrize("lookup, ptds", [("linked", False), ("linked", True), ("dlsym", True),
                                          ("dlsym-old", False), ("gpa", False), ("gpa2", True),
                                          ("gpa2", False)])
def test_every_gated_entry_point_calls_its_own_variant(world, lookup, ptds):
    world.scheduler(mode="off")
    app = world.run("init", "ctx", 0, "alloc", "64K", "gated-all", lookup=lookup, ptds=ptds)
    step = app.wait_step("gated-all")
    assert {k: v for k, v in step["rets"].items() if v != 0} == {}
    assert {k: v for k, v in step["libs"].items() if v != LIB} == {}, "resolved past the interposer"
    expected = sorted(pt if ptds else legacy for _slot, legacy, pt in GATED)
    called = sorted(e["fn"] for e in world.log.work(app.pid))
    assert called == expected
    assert world.log.errors(app.pid) == []


def _blocked_until_released(world, lookup, ptds):
    """Every gated entry point waits while another process holds the GPU."""
    sched = world.scheduler(mode="serial")
    holder = world.app("init", "ctx", 0, "launch", 1, "pause", env={"NVSHARE_IDLE_RELEASE_MS": 60000})
    holder.paused()
    sched.wait_holder(holder.pid)
    apps = {slot: world.app("init", "ctx", 0, "alloc", "64K", "call", slot, lookup=lookup, ptds=ptds)
            for slot, _legacy, _pt in GATED}
    for a in apps.values():
        a.wait_step("alloc", timeout=60)
    # all of them reach the gate and queue
    poll(lambda: set(sched.queue()) >= {a.pid for a in apps.values()}, timeout=60,
         what="every caller to be queued for the lock")
    ran = [slot for slot, a in apps.items() if a.has_step("call")]
    assert ran == [], f"these ran while another process held the GPU: {ran}"
    released_at = time.monotonic_ns()  # CLOCK_MONOTONIC, as the mock's t0
    holder.resume()
    assert holder.finish() == 0
    for slot, a in apps.items():
        assert a.finish(timeout=60) == 0
        assert a.wait_step("call")["ret"] == 0, slot
    for slot, a in apps.items():
        (call,) = world.log.work(a.pid)
        assert call["t0"] > released_at, f"{slot} ran before the holder let go"


def test_every_gated_entry_point_waits_for_the_lock(world):
    _blocked_until_released(world, "linked", False)


def test_every_per_thread_entry_point_waits_for_the_lock(world):
    _blocked_until_released(world, "gpa2", True)


@pytest.mark.parametrize("lookup", ["gpa", "gpa2", "dlsym", "linked"])
def test_get_proc_address_of_itself_returns_the_interposer(world, lookup):
    """The runtime asks cuGetProcAddress("cuGetProcAddress") and uses the answer for everything."""
    app = world.run("gpa", "cuGetProcAddress", 13000, 0, "gpa", "cuGetProcAddress", 11030, 0,
                    lookup=lookup)
    v2, v1 = app.steps("gpa")
    assert (v2["ret"], v2["lib"], v2["sym"]) == (0, LIB, "cuGetProcAddress_v2")
    assert (v1["ret"], v1["lib"], v1["sym"]) == (0, LIB, "cuGetProcAddress")


@pytest.mark.parametrize("lookup", ["dlsym", "dlsym-old", "linked"])
def test_dlsym_of_hooked_and_plain_names(world, lookup):
    app = world.run("lookup", "cuGetProcAddress_v2", "lookup", "cuGetProcAddress", "lookup",
                    "cuMemAlloc_v2", "lookup", "cuLaunchKernel_ptsz", "lookup", "cuDeviceGetName",
                    "lookup", "cuNoSuchFunction", lookup=lookup)
    got = {s["name"]: (s["lib"], s["sym"]) for s in app.steps("lookup")}
    assert got == {
        "cuGetProcAddress_v2": (LIB, "cuGetProcAddress_v2"),
        "cuGetProcAddress": (LIB, "cuGetProcAddress"),
        "cuMemAlloc_v2": (LIB, "cuMemAlloc_v2"),
        "cuLaunchKernel_ptsz": (LIB, "cuLaunchKernel_ptsz"),
        "cuDeviceGetName": (DRIVER, "cuDeviceGetName"),
        "cuNoSuchFunction": (None, None),
    }


@pytest.mark.parametrize("lookup", ["gpa", "gpa2"])
def test_get_proc_address_versions_and_flags(world, lookup):
    app = world.run("gpa", "cuMemAlloc", 13000, 0, "gpa", "cuLaunchKernel", 13000, 2,
                    "gpa", "cuMemcpyHtoD", 13000, 2, "gpa", "cuStreamWaitValue32", 11000, 0,
                    "gpa", "cuDeviceGetName", 13000, 0, "gpa", "cuNoSuchFunction", 13000, 0, lookup=lookup)
    got = [(s["name"], s["ret"], s["lib"], s["sym"]) for s in app.steps("gpa")]
    assert got == [
        ("cuMemAlloc", 0, LIB, "cuMemAlloc_v2"),
        ("cuLaunchKernel", 0, LIB, "cuLaunchKernel_ptsz"),
        ("cuMemcpyHtoD", 0, LIB, "cuMemcpyHtoD_v2_ptds"),
        ("cuStreamWaitValue32", 0, LIB, "cuStreamWaitValue32"),
        ("cuDeviceGetName", 0, DRIVER, "cuDeviceGetName"),
        ("cuNoSuchFunction", 500, None, None),
    ]


def _probe(world, artifacts, tmp_path, preload, **env):
    out = tmp_path / "probe.json"
    world.run("init", env={"LD_PRELOAD": preload, "RTLD_NEXT_PROBE_OUT": out, **env})
    return json.loads(out.read_text())


def test_rtld_next_of_a_later_preload_library_still_works(world, artifacts, tmp_path):
    """glibc computes RTLD_NEXT from dlsym's caller: the interposer must tail-call the real dlsym."""
    probe = _probe(world, artifacts, tmp_path, f"{world.library} {artifacts.rtld_next_probe}")
    assert probe == {
        "rand": "libc.so.6",
        "marker": None,  # RTLD_NEXT from the probe must not find the probe's own definition
        "cuDeviceGetName": DRIVER,
    }


def test_rtld_next_of_a_hooked_name_from_a_later_preload_library(world, artifacts, tmp_path):
    probe = _probe(world, artifacts, tmp_path, f"{world.library} {artifacts.rtld_next_probe}",
                   RTLD_NEXT_PROBE_HOOKED=1)
    assert probe == {"cuMemAlloc_v2": LIB, "default_cuMemAlloc_v2": LIB}


def test_rtld_next_probe_control_without_interposer(world, artifacts, tmp_path):
    """The probe itself is sound: without libnvshare.so it sees libc and the driver."""
    probe = _probe(world, artifacts, tmp_path, str(artifacts.rtld_next_probe))
    assert probe == {"rand": "libc.so.6", "marker": None, "cuDeviceGetName": DRIVER}
    probe = _probe(world, artifacts, tmp_path, str(artifacts.rtld_next_probe), RTLD_NEXT_PROBE_HOOKED=1)
    assert probe == {"cuMemAlloc_v2": DRIVER, "default_cuMemAlloc_v2": DRIVER}
