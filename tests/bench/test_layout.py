"""bench/ as a package: every module imports as bench.<room>.<name>, every program a benchmark
starts by path is where it says, and every benchmark of the suite runs alone with
`python3 -m bench.<room>.<name>` (its --help, from the repository's root). What a move of files
could break, checked without a GPU."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.core import suite

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _modules() -> list[str]:
    out = []
    for p in sorted(BENCH.rglob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        if "probes" in rel.parts or p.name in ("__init__.py", "__main__.py"):
            continue
        top_level = ast.parse(p.read_text()).body  # programs that import torch at once are workers
        if any(isinstance(n, ast.Import) and any(a.name == "torch" for a in n.names) for n in top_level):
            continue
        out.append(".".join(rel.parts))
    return out


@pytest.mark.parametrize("name", _modules())
def test_every_benchmark_module_imports_from_the_package(name):
    importlib.import_module(name)


def test_every_program_a_benchmark_or_test_starts_by_path_is_there():
    found = 0
    for p in [*BENCH.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "testkit").glob("*.py")]:
        text = p.read_text()
        for room, program in re.findall(r'BENCH / "(\w+)" / "([\w.]+)"', text):
            assert (BENCH / room / program).is_file(), f"{p}: bench/{room}/{program}"
            found += 1
        for parts in re.findall(r'"bench"((?: / "[\w.]+")+)', text):
            path = ROOT.joinpath("bench", *re.findall(r'"([\w.]+)"', parts))
            assert path.exists(), f"{p}: {path}"
            found += 1
    assert found >= 9  # the workloads, workers, servers, the loop watch, the CUDA source, tests/gpu


def _programs() -> list[str]:
    """The modules that run as programs (a __main__ block): the benchmarks and their workers."""
    wrappers = {"bench.core.loopwatch"}  # runs another module (-m xpushare.scheduler): no --help
    return sorted(n for n in set(_modules()) - wrappers
                  if 'if __name__ == "__main__"' in (ROOT / (n.replace(".", "/") + ".py")).read_text())


def test_the_suite_finds_each_benchmark_in_its_room():
    for name in (*suite.SUITE, *suite.CPU):
        assert suite.module(name).NAME == name
    with pytest.raises(ModuleNotFoundError):
        suite.module("no_such_benchmark")


@pytest.mark.parametrize("module", _programs())
def test_every_benchmark_program_runs_alone_as_a_module(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stderr


def test_the_suite_runs_as_python_m_bench():
    r = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--only" in r.stdout, r.stderr
