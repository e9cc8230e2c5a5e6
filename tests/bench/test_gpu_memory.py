"""CPU tests of the GPU safety check (bench/core/common.py) and the GPU memory rules (bench/core/gpu_memory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.core import common
from bench.core import gpu_memory
from bench.scheduling import jobs
from bench.scheduling import makespan_common
from bench.core.common import harness
from bench.scheduling.job_program import GIB, MIB


# ----------------------------------------------------------------------------- GPU memory rules

def test_safety_refuses_a_busy_gpu_and_too_much_under_the_library():
    for mem, strict, refused in (((40_000, 81_559), False, True), ((60_000, 81_559), False, False),
                                 (None, False, False), (None, True, True), ((60_000, 81_559), True, False)):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(harness, "gpu_memory_mib", lambda: mem)
            assert (common.gpu_problem(strict) is not None) == refused
    assert gpu_memory.library_total_problem([12 * GIB, 12 * GIB]) is None
    assert "24" in gpu_memory.library_total_problem([12 * GIB, 12 * GIB + 1])


def test_the_default_sizes_stay_within_the_safety_limit():
    assert gpu_memory.library_total_problem([makespan_common.FIT_SIZE.footprint_estimate()] * 4) is None
    assert gpu_memory.library_total_problem([makespan_common.PAIR_SIZE.footprint_estimate()] * 2) is None


def test_footprint_estimate_holds_the_working_set_and_grows_with_the_model():
    small = jobs.JobSize(width=256, depth=2, batch=32, resident_gib=0.0)
    assert small.footprint_estimate() < jobs.JobSize(width=2048, depth=2, batch=32).footprint_estimate()
    with_set = jobs.JobSize(width=256, depth=2, batch=32, resident_gib=6.0)
    assert with_set.footprint_estimate() - small.footprint_estimate() == 6 * GIB


def test_separating_capacity_holds_one_job_but_not_two():
    for sizes in ([6 * GIB, 6 * GIB], [6 * GIB + 300 * MIB, 1 * GIB], [8 * GIB, 7 * GIB]):
        capacity = gpu_memory.separating_capacity(sizes)
        assert capacity % (64 * MIB) == 0
        assert gpu_memory.separates(sizes, gpu_memory.budget_of(capacity))
        assert not gpu_memory.separates(sizes, gpu_memory.budget_of(capacity * 2))  # both fit: no separation
    with pytest.raises(ValueError):
        gpu_memory.separating_capacity([GIB])


def test_admission_counts_each_client_with_its_context():
    budget = gpu_memory.budget_of(16 * GIB)
    assert budget == 16 * GIB - round(16 * GIB * 0.05)
    assert gpu_memory.fits_together([1 * GIB] * 4, budget)
    assert gpu_memory.fits_together([3 * GIB] * 4, budget)  # 4 x 3.75 GiB counted: 15 of 15.2
    assert not gpu_memory.fits_together([3 * GIB + 256 * MIB] * 4, budget)  # 4 x 4 GiB
    assert gpu_memory.budget_of(10 * GIB, reserve=GIB) == 9 * GIB


def _status(footprints: dict[int, int], budget: int | None = None) -> dict:
    return {"ok": True,
            "gpus": [{"uuid": "GPU-x", "budget": budget, "capacity": 0}],
            "clients": [{"pid": pid, "gpus": [{"uuid": "GPU-x", "managed_bytes": b, "other_bytes": 0}]}
                        for pid, b in footprints.items()]}


def test_footprints_are_read_from_the_status_of_the_scheduler():
    status = _status({5: 3 * GIB, 6: 2 * GIB, 7: GIB}, budget=9 * GIB)
    assert gpu_memory.footprints_in(status, [5, 6]) == {5: {"bytes": 3 * GIB, "gpu": "GPU-x"},
                                                  6: {"bytes": 2 * GIB, "gpu": "GPU-x"}}
    assert gpu_memory.gpu_budget(status, "GPU-x") == 9 * GIB
    assert gpu_memory.footprints_in(None, [5]) == {}


def test_ensure_separating_sets_a_capacity_when_the_estimate_was_wrong(monkeypatch):
    sent = []
    monkeypatch.setattr(gpu_memory, "scheduler_status", lambda sock: _status({5: 6 * GIB, 6: 6 * GIB}))
    monkeypatch.setattr(gpu_memory, "control", lambda sock, op, **f: sent.append((op, f)) or {"ok": True})
    check = gpu_memory.ensure_separating(Path("/x"), [5, 6], 20 * GIB, "test")  # 20 GiB holds both
    assert sent and sent[0][0] == "set_gpu_memory" and sent[0][1]["gpu"] == "GPU-x"
    assert check["separates"] and check["adjusted_from"] == 20 * GIB
    assert check["capacity"] == sent[0][1]["bytes"] == gpu_memory.separating_capacity([6 * GIB, 6 * GIB])
    sent.clear()
    good = gpu_memory.ensure_separating(Path("/x"), [5, 6], check["capacity"], "test")
    assert good["separates"] and not sent


def test_ensure_separating_leaves_the_capacity_without_footprints(monkeypatch):
    monkeypatch.setattr(gpu_memory, "scheduler_status", lambda sock: None)
    check = gpu_memory.ensure_separating(Path("/x"), [5, 6], 11 * GIB, "test")
    assert check["capacity"] == 11 * GIB and "note" in check
