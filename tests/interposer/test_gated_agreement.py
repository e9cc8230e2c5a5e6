"""The gated set is native/src/hooks/hooks.h's: every other place that knows it must agree.

- hooks_table.py reads the NVS_HOOKS list as text (harness.is_gated uses it); a C program built
  against hooks.h expands NVS_HOOKS with its own X macro and prints each exported variant with its
  kind: the two readings must be equal.
- cuda_app's GATED table: `gated-all` (run on the mock driver alone, legacy and per-thread names)
  must call exactly the GATE variants of hooks.h, each successfully.
- the mock driver marks every call that goes through its gated path ("gated":1 in its log): it must
  mark exactly those calls, so a gated entry point added to hooks.h without the mock's gated
  implementation (or exported by the mock without one) fails here.
- harness.is_gated must say the same as the mock's mark for every logged call, gated or not.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .harness import is_gated
from .hooks_table import (GATED_KINDS, HOOKS_H, NATIVE_INCLUDE, app_gated_table, gated_names,
                          hooks)

PRINTER = r"""
#include <stdio.h>
#include "hooks.h"
#define PRINT_ONE_(sfx, pt, kind, name) printf("%s %s\n", #kind, #name #sfx);
#define PRINT_(kind, name, base, ver, variants, params, args, stream) \
    NVS_VARIANTS_##variants(PRINT_ONE_, kind, name)
int main(void)
{
    NVS_HOOKS(PRINT_)
    return 0;
}
"""


def _compiled_hooks(tmp_path) -> list[tuple[str, str]]:
    """(kind, exported name) of every variant, as the C preprocessor expands NVS_HOOKS."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed")
    src, exe = tmp_path / "hooks_print.c", tmp_path / "hooks_print"
    src.write_text(PRINTER)
    subprocess.run(["gcc", "-O0", "-w", f"-I{HOOKS_H.parent}", f"-I{NATIVE_INCLUDE}", "-o", exe, src],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return [tuple(line.split()) for line in out.splitlines()]


def test_the_text_reading_of_hooks_h_is_the_compilers(tmp_path):
    compiled = _compiled_hooks(tmp_path)
    read = [(h.kind, n) for h in hooks() for n in h.exported]
    assert read == compiled
    assert {n for kind, n in compiled if kind in GATED_KINDS} == gated_names()
    assert len(gated_names()) > 50 and "cuLaunchKernel" in gated_names()


def _gated_all(world, ptds: bool):
    app = world.run("init", "ctx", 0, "alloc", "64K", "stream", "streamsync", "nostream", "meminfo",
                    "gated-all", "ctxsync", "free", "last", ptds=ptds, preload=False)
    return app, world.log.entries(app.pid)


@pytest.mark.parametrize("ptds", [False, True], ids=["legacy", "ptds"])
def test_the_app_and_the_mock_gate_exactly_the_hooks_h_set(bare_world, ptds):
    app, logged = _gated_all(bare_world, ptds)
    expected = {(h.twin if ptds else h.name) for h in hooks() if h.kind in GATED_KINDS}
    called = {e["fn"] for e in logged if e.get("gated")}
    missing, extra = sorted(expected - called), sorted(called - expected)
    assert (missing, extra) == ([], []), \
        "hooks.h's GATE lines and the test app's GATED table (or the mock's gated entry points) differ"
    assert {k: v for k, v in app.wait_step("gated-all")["rets"].items() if v != 0} == {}
    # the app's source table names the same entry points as what it called
    assert {pt if ptds else legacy for _slot, legacy, pt in app_gated_table()} == expected


def test_is_gated_agrees_with_the_mock_driver(bare_world):
    logged = [e for ptds in (False, True) for e in _gated_all(bare_world, ptds)[1]]
    assert any(not e.get("gated") for e in logged), "the scenario makes calls that are not gated"
    wrong = sorted({e["fn"] for e in logged if is_gated(e["fn"]) != bool(e.get("gated"))})
    assert wrong == [], "harness.is_gated and the mock driver disagree on these"
    assert {e["fn"] for e in logged if e.get("gated")} == gated_names()
