"""Driver lookups on the real driver: under libnvshare.so every way a program finds an intercepted
entry point (cuGetProcAddress_v2 as the CUDA runtime calls it, dlsym on libcuda) hands out the
library's wrapper of exactly the variant the real driver would hand out; other entry points are
left alone; and a real PyTorch process triggers no "unmatched" lookup (NVSHARE_DEBUG).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from testkit import gpu as harness
from testkit.gpu import PROGRAMS, python_cmd

from ..interposer.hooks_table import hooks

LIBRARY_FILE = "libnvshare.so"

# The intercepted entry points (base names), read from the one table, native/src/hooks/hooks.h.
HOOKED = sorted({hook.base for hook in hooks()})
NOT_HOOKED = ["cuEventSynchronize", "cuModuleLoadData", "cuMemPrefetchAsync"]


def lookup_report(env: dict[str, str], variants: bool) -> dict:
    argv = python_cmd(PROGRAMS / "driver_lookup.py", "--names", ",".join(HOOKED + NOT_HOOKED),
                      *(["--variants"] if variants else []))
    run = harness.run(argv, env, timeout=60).check()
    assert run.result is not None, run.describe()
    return run.result


@pytest.fixture(scope="module")
def native() -> dict:
    """What the real driver hands out, with every exported variant name equal to each pointer."""
    return lookup_report(harness.native_env(), variants=True)


@pytest.fixture(scope="module")
def shared(nvshare_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What a program under the library gets. Lookups submit no work, so no scheduler is needed; the
    socket path leads nowhere (never to a system scheduler that may run on this machine)."""
    nowhere = tmp_path_factory.mktemp("lookup") / "no-scheduler.sock"
    return lookup_report(harness.library_env(nvshare_lib, nowhere), variants=False)


@pytest.mark.timeout(180)
def test_cuGetProcAddress_returns_our_wrapper_of_the_variant_the_driver_returns(native, shared) -> None:
    assert shared["library_loaded"] and not native["library_loaded"]
    assert shared["gpa_function"]["file"] == LIBRARY_FILE, shared["gpa_function"]
    problems = []
    for real, ours in zip(native["lookups"], shared["lookups"], strict=True):
        key = f"{real['name']} v{real['version']} flags={real['flags']}"
        assert (real["name"], real["version"], real["flags"]) == (ours["name"], ours["version"], ours["flags"])
        if real["rc"] != 0 or real["got"] is None:
            continue  # the driver does not have it: nothing to match
        if ours["rc"] != 0 or ours["got"] is None:
            problems.append(f"{key}: driver returned {real['got']['symbol']}, we returned rc={ours['rc']}")
        elif real["name"] in HOOKED:
            if ours["got"]["file"] != LIBRARY_FILE or ours["got"]["symbol"] not in real["same_as"]:
                problems.append(f"{key}: driver returned {real['same_as']}, we returned {ours['got']}")
        elif ours["got"]["file"] == LIBRARY_FILE:
            problems.append(f"{key}: not intercepted, yet we returned our {ours['got']['symbol']}")
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(180)
def test_dlsym_of_each_live_variant_returns_our_wrapper_of_that_name(native, shared) -> None:
    # The variants the real driver hands out for the intercepted entry points (per-thread ones included).
    live = {n for lk in native["lookups"] if lk["name"] in HOOKED and lk["rc"] == 0 for n in lk["same_as"]}
    assert "cuLaunchKernel_ptsz" in live and "cuMemAlloc_v2" in live, sorted(live)
    wrong = {name: shared["dlsym"].get(name) for name in sorted(live)
             if shared["dlsym"].get(name) != {"file": LIBRARY_FILE, "symbol": name}}
    assert not wrong, f"dlsym(libcuda, name) did not give our wrapper of that name: {wrong}"
    untouched = {n: shared["dlsym"][n] for n in shared["dlsym"]
                 if n.startswith(tuple(NOT_HOOKED)) and shared["dlsym"][n]["file"] == LIBRARY_FILE}
    assert not untouched, f"entry points that are not intercepted came from the library: {untouched}"


@pytest.mark.timeout(180)
def test_pytorch_process_has_no_unmatched_driver_lookups(under_library, scheduler) -> None:
    shared_run = harness.run(python_cmd(PROGRAMS / "torch_workload.py"), under_library(NVSHARE_DEBUG=1),
                             timeout=120)
    harness.check_shared(shared_run, timeout=120)
    result = shared_run.result
    assert result and math.isclose(result["value"], result["thread_value"], rel_tol=1e-5), shared_run.describe()
    lines = harness.debug_lines(shared_run.stderr)
    assert lines, f"NVSHARE_DEBUG=1 printed nothing\n{shared_run.describe()}"
    unmatched = [line for line in lines if "unmatched" in line.lower()]
    assert not unmatched, "lookups the library could not match:\n" + "\n".join(unmatched[:50])
