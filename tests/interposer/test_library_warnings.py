"""What the library says on stderr without NVSHARE_DEBUG: a bad NVSHARE_PRIORITY, a bad compute limit
or share (and a compute limit it cannot enforce), and an allocation
refused by the per-process cap (once; the next ones only with NVSHARE_DEBUG). The README quotes
these lines; the texts checked here are those quotes."""

import pytest
from xpushare.wire.protocol import MessageType

OOM = 2


def _lines(app):
    return app.stderr().splitlines()


@pytest.mark.parametrize("value", ["1001", "-1001", "99999999999999999999"])
def test_out_of_range_priority_is_reported_and_ignored(world, recorder, value):
    app = world.run("init", "ctx", 0, "launch", 1, env={"NVSHARE_PRIORITY": value})
    assert _lines(app) == [f'nvshare[{app.pid}]: warning: ignoring NVSHARE_PRIORITY="{value}": '
                           "expected an integer in [-1000, 1000]"]
    (hello,) = recorder.messages(MessageType.HELLO)
    assert hello.msg.priority == 0, "the default, as for any other bad value"


@pytest.mark.parametrize("value", [1000, -1000, 7])
def test_priority_in_range_is_sent_quietly(world, recorder, value):
    app = world.run("init", "ctx", 0, "launch", 1, env={"NVSHARE_PRIORITY": value})
    assert _lines(app) == []
    (hello,) = recorder.messages(MessageType.HELLO)
    assert hello.msg.priority == value


@pytest.fixture
def sched(world):
    return world.scheduler(mode="off")


def _allocs(app):
    return [s["ret"] for s in app.steps("alloc")]


def test_first_refusal_by_the_limit_is_said_once(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "3G", "alloc", "2G", "alloc", "1536M", "alloc", "512M",
                    env={"NVSHARE_GPU_MEMORY_LIMIT": "4G", "NVSHARE_CONTEXT_RESERVE": 0})
    assert _allocs(app) == [0, OOM, OOM, 0]
    assert _lines(app) == [
        f"nvshare[{app.pid}]: warning: cuMemAlloc_v2 of 2147483648 bytes (2.00 GiB) on device 0 "
        "refused with CUDA_ERROR_OUT_OF_MEMORY: this process holds 3.00 GiB there and may hold "
        "4.00 GiB (NVSHARE_GPU_MEMORY_LIMIT; raise it to allow more). Further refusals are logged "
        "only with NVSHARE_DEBUG=1"]


def test_refusal_at_the_capacity_names_single_oversub(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "6G", "alloc", "3G",
                    env={"NVSHARE_GPU_MEMORY": "8G", "NVSHARE_CONTEXT_RESERVE": 0})
    assert _allocs(app) == [0, OOM]
    (line,) = _lines(app)
    assert line.endswith("this process holds 6.00 GiB there and may hold 8.00 GiB (the GPU's "
                         "capacity; NVSHARE_ENABLE_SINGLE_OVERSUB=1 lets it go past it). Further "
                         "refusals are logged only with NVSHARE_DEBUG=1"), line


@pytest.mark.managed_backing  # the managed backing's conversion; test_alloc_vmm.py: the default
def test_further_refusals_are_in_the_debug_log(world, sched):
    app = world.run("init", "ctx", 0, "alloc", "3G", "alloc", "2G", "alloc", "5M",
                    env={"NVSHARE_GPU_MEMORY_LIMIT": "3G", "NVSHARE_CONTEXT_RESERVE": 0,
                         "NVSHARE_DEBUG": 1})
    assert _allocs(app) == [0, OOM, OOM]
    lines = _lines(app)
    assert len([ln for ln in lines if ": warning: " in ln]) == 1, lines
    assert [ln for ln in lines if "cuMemAlloc_v2(5242880) on device 0: over the limit" in ln], lines


@pytest.mark.parametrize("value", ["0", "101", "abc", "-5", "50%%", "0.05", "none please"])
def test_bad_compute_limit_is_reported_once_and_ignored(world, recorder, value):
    from xpushare.wire.protocol import FEATURE_QUOTAS
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.run("init", "ctx", 0, "launch", 1, env={"NVSHARE_COMPUTE_LIMIT": value})
    assert _lines(app) == [f'nvshare[{app.pid}]: warning: ignoring NVSHARE_COMPUTE_LIMIT="{value}": '
                           "expected a percentage from 0.1 to 100 (e.g. 50 or 50%) or none"]
    (st,) = recorder.messages(MessageType.SETTINGS)
    assert st.msg.compute_limit == 0


@pytest.mark.parametrize("value", ["0", "-1", "x", "0.0001", "1e3"])
def test_bad_compute_share_is_reported_once_and_ignored(world, recorder, value):
    from xpushare.wire.protocol import FEATURE_QUOTAS
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.run("init", "ctx", 0, "launch", 1, env={"NVSHARE_COMPUTE_SHARE": value})
    assert _lines(app) == [f'nvshare[{app.pid}]: warning: ignoring NVSHARE_COMPUTE_SHARE="{value}": '
                           "expected a number from 0.001 to 1000000 (e.g. 0.5 or 30)"]
    (st,) = recorder.messages(MessageType.SETTINGS)
    assert st.msg.compute_share == 0


@pytest.mark.parametrize("limit, share, expected", [("1", "30", (10, 30000)), ("100%", "0.5", (1000, 500)),
                                                    ("12.5", "0.001", (125, 1)), ("none", "2", (0, 2000)),
                                                    ("0.1", "1000000", (1, 10**9)),
                                                    (" 75 % ", "1.0", (750, 1000))])
def test_good_compute_settings_are_sent_quietly(world, recorder, limit, share, expected):
    from xpushare.wire.protocol import FEATURE_QUOTAS
    recorder.welcome_features = FEATURE_QUOTAS
    app = world.run("init", "ctx", 0, "launch", 1,
                    env={"NVSHARE_COMPUTE_LIMIT": limit, "NVSHARE_COMPUTE_SHARE": share})
    assert _lines(app) == []
    (st,) = recorder.messages(MessageType.SETTINGS)
    assert (st.msg.compute_limit, st.msg.compute_share) == expected


def test_an_unenforceable_compute_limit_is_reported(world, recorder):
    app = world.run("init", "ctx", 0, "launch", 1,
                    env={"NVSHARE_COMPUTE_LIMIT": "50", "NVSHARE_MAX_INFLIGHT": 0})
    assert _lines(app) == [f"nvshare[{app.pid}]: warning: the compute limit is not enforced: GPU time "
                           "is not measured with NVSHARE_MAX_INFLIGHT=0 or NVSHARE_DRAIN_TARGET_MS=0"]


def test_without_a_driver_one_line_says_nothing_is_shared(nvshare_lib, tmp_path):
    """A CUDA call into the library where no driver can be loaded: one warning, the call fails (as
    it would without the library) and the process goes on."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVSHARE_DEBUG")}
    env.update(LD_PRELOAD=str(nvshare_lib), NVSHARE_CUDA_LIBRARY="/nonexistent/libcuda.so.1",
               NVSHARE_SOCK_PATH=str(tmp_path / "none.sock"))
    code = ("import ctypes; f, t = ctypes.c_size_t(), ctypes.c_size_t(); "
            f"print(ctypes.CDLL({str(nvshare_lib)!r}).cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() not in ("", "0"), "the call failed"
    said = [ln for ln in r.stderr.splitlines() if "no NVIDIA driver found" in ln]
    assert len(said) == 1 and "nothing is shared" in said[0], r.stderr
