"""bench/launch/launch_overhead.py's paired runs without a GPU: a stand-in for the CUDA program
prints the paired lines with a per-round difference set by the library it runs under, so that the
test can check which side each pooled figure comes from, that another library given with --compare
is measured interleaved with this tree's, and that bad flags print usage."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bench.launch import launch_overhead

# Added ns per round under each library; the native side (no LD_PRELOAD) adds nothing.
ADDED = {"new.so": 50.0, "old.so": 30.0}
FAKE = r'''
import json, os, sys
added = {added!r}
preload = os.environ.get("LD_PRELOAD", "")
delta = next((v for k, v in added.items() if preload.endswith(k)), 0.0)
if os.environ.get("NVSHARE_MAX_INFLIGHT") == "0":
    delta -= 20.0  # checkpoints off
with open({log!r}, "a") as log:
    gate = "+gate-only" if os.environ.get("NVSHARE_MAX_INFLIGHT") == "0" else ""
    log.write((os.path.basename(preload) or "native") + gate + "\n")
rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
def series(base):
    one = {{"wrapper_ns": base + delta, "real_ns": base, "delta_ns": delta, "delta_q1": delta,
           "delta_q3": delta, "deltas": [delta] * rounds}}
    return {{"submit": one, "total": one, "wrapper_result": "CUDA_SUCCESS", "real_result": "CUDA_SUCCESS"}}
lookup = {{"hooked": bool(preload), "wrapper_object": preload, "real_object": "libcuda.so.1"}}
print(json.dumps({{"mode": "paired", "dlsym_object": "libc",
                  "cuLaunchKernel": {{"lookup": lookup, "series": series(3700.0)}},
                  "cuLaunchKernelEx": {{"lookup": lookup, "series": series(3900.0)}}}}))
null = series(700.0)
del null["total"]
print(json.dumps({{"mode": "paired-null", "cuLaunchKernel_null": null}}))
'''


def fake_program(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "order.log"
    program = tmp_path / "launch_overhead"
    program.write_text(f"#!{sys.executable}\n" + FAKE.format(added=ADDED, log=str(log)))
    program.chmod(0o755)
    return program, log


def envs_for(tmp_path: Path) -> dict[str, dict[str, str]]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    new, old = str(tmp_path / "new.so"), str(tmp_path / "old.so")
    return {"native": base, "library": {**base, "LD_PRELOAD": new},
            "gate_only": {**base, "LD_PRELOAD": new, "NVSHARE_MAX_INFLIGHT": "0"},
            launch_overhead.COMPARE + "old": {**base, "LD_PRELOAD": old}}


def test_a_compared_library_is_pooled_apart_from_this_trees_and_run_interleaved(tmp_path):
    program, log = fake_program(tmp_path)
    paired = launch_overhead.measure_paired(program, envs_for(tmp_path), runs=3, control_runs=1,
                                            gate_only_runs=1, rounds=5, batch=10)
    launch = paired["functions"]["cuLaunchKernel"]["submit"]
    assert launch["library"]["delta_ns"] == 50.0 and launch["library"]["rounds"] == 15
    assert launch["control"]["delta_ns"] == 0.0 and launch["gate_only"]["delta_ns"] == 30.0
    old = paired["compare"]["old"]
    assert old["cuLaunchKernel"]["submit"]["delta_ns"] == 30.0
    assert old["cuLaunchKernel"]["submit"]["rounds"] == 15
    assert old["cuLaunchKernelEx"]["total"]["delta_ns"] == 30.0
    assert old["cuLaunchKernel_null"]["submit"]["delta_ns"] == 30.0
    # Round-robin over the sides: the compared library's runs alternate with this tree's.
    assert log.read_text().split() == ["new.so", "native", "new.so+gate-only", "old.so",
                                       "new.so", "old.so", "new.so", "old.so"]
    text = launch_overhead.paired_text(paired)
    assert "this tree  +20.0 ns against it" in text and text.count("old ") >= 3


def test_without_compare_there_is_no_compare_section(tmp_path):
    program, _ = fake_program(tmp_path)
    envs = {k: v for k, v in envs_for(tmp_path).items() if not k.startswith(launch_overhead.COMPARE)}
    paired = launch_overhead.measure_paired(program, envs, runs=1, control_runs=0, gate_only_runs=0,
                                            rounds=3, batch=10)
    assert "compare" not in paired
    assert json.dumps(paired)  # the suite stores it as JSON


@pytest.mark.parametrize("bad", [["--compare", "nolabel"], ["--compare", "x=/no/such/file"],
                                 ["--compare", "=/bin/sh"], ["--reps", "-1"]])
def test_bad_flags_print_usage(bad, capsys):
    with pytest.raises(SystemExit) as e:
        launch_overhead.main(bad)
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err
