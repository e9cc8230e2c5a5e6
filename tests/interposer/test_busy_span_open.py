"""Which calls open a busy span (gate.h, busy.c): only kernel launches (hooks.h's LAUNCH lines).

A timing event that the library records on an idle stream before a copy made the copy wait for
another process's time slice on a real GPU (bench/probes/timed_events.py): an inference server that
synchronises and then copies its answer out waited one slice more per request. So after an idle
point a copy or memset records no start event, and a synchronisation with no kernel since the idle
point records no checkpoint; the next kernel launch records the start event, before itself.
Checked on the order of the mock driver's log.
"""

from __future__ import annotations

import pytest

from .hooks_table import hooks

NOT_SPAN_OPENERS = ["cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2", "cuMemsetD32Async"]


def _calls(world, app) -> list[dict]:
    tid = app.lines[0]["tid"]
    return [e for e in sorted(world.log.entries(app.pid), key=lambda e: e["t0"]) if e["tid"] == tid]


def _after_step(calls: list[dict], t: int) -> list[str]:
    return [e["fn"] for e in calls if e["t0"] >= t]


@pytest.mark.parametrize("fn", NOT_SPAN_OPENERS)
def test_a_copy_after_an_idle_point_records_no_event(world, recorder, fn):
    app = world.run("init", "ctx", 0, "stream", "launch", 5, "streamsync",
                    "call", fn, "streamsync", "call", fn, "ctxsync", "launch", 3, "streamsync",
                    env={"NVSHARE_IDLE_RELEASE_MS": 0})
    steps = [line for line in app.lines if line.get("step")]
    idle = next(line for line in steps if line["step"] == "streamsync")
    kernels_again = [line for line in steps if line["step"] == "launch"][1]
    calls = _calls(world, app)
    between = [e["fn"] for e in calls if idle["t"] <= e["t0"] < kernels_again["t0"]]
    assert between.count(fn) == 2, between
    assert not [f for f in between if f.startswith("cuEventRecord")], \
        f"an event was recorded around a {fn} after an idle point: {between}"
    # the kernels after them open the span: a start event right before the first of them
    later = _after_step(calls, kernels_again["t0"])
    first_launch = later.index("cuLaunchKernel")
    assert first_launch > 0 and later[first_launch - 1].startswith("cuEventRecord"), later
    # and their synchronisation ends it with a checkpoint, which the start event is timed against
    spans = [e for e in world.log.entries(app.pid) if e["fn"].startswith("cuEventElapsedTime")]
    assert spans and all(e["ret"] == 0 for e in spans), spans


def test_a_copy_inside_a_span_is_part_of_it(world, recorder):
    """Kernels, then a copy, then a synchronisation: the span the kernels opened ends at the
    checkpoint recorded before the synchronisation, after the copy."""
    app = world.run("init", "ctx", 0, "stream", "launch", 4, "call", "cuMemcpyDtoHAsync_v2",
                    "streamsync", env={"NVSHARE_IDLE_RELEASE_MS": 0})
    fns = [e["fn"] for e in _calls(world, app)]
    copy = fns.index("cuMemcpyDtoHAsync_v2")
    assert any(f.startswith("cuEventRecord") for f in fns[copy + 1:fns.index("cuStreamSynchronize")]), fns


def test_the_table_names_every_kernel_launch_a_span_opener():
    kinds = {h.name: h.kind for h in hooks()}
    assert {n for n, k in kinds.items() if k == "LAUNCH"} == {
        "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch"}
    assert all(kinds[n] == "GATE" for n in NOT_SPAN_OPENERS)
