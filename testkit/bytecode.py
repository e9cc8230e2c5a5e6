"""Bytecode made once per test run, before the parallel workers start, so that nothing compiles the
same source twice.

CI (and many shells) set PYTHONDONTWRITEBYTECODE=1: no process then writes a .pyc, and every
process compiles what it imports from source again. The tests start hundreds of Python processes
(schedulers, nvsharectl, fake workloads) that import this checkout's src/, and each pytest-xdist
worker rewrites the asserts of every test module it collects. Python and pytest still READ a cached
.pyc that is up to date (checked against the source: an edited file is compiled afresh), so
writing them here once serves every later process:

- compile_tree(): the ordinary .pyc of src/, testkit/, bench/ and the test helpers (py_compile
  writes whatever sys.dont_write_bytecode says);
- write_assert_rewrites(): pytest's assert-rewritten .pyc of the test modules and conftest files,
  which each worker would otherwise make itself (PYC_TAIL names pytest's version: another pytest
  makes its own). That part uses pytest's internals; should they change, it does nothing and
  the workers rewrite as before.
"""

from __future__ import annotations

import compileall
import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREES = ("src", "testkit", "bench", "tests")


def compile_tree(repo: Path = REPO) -> None:
    for name in TREES:
        if (repo / name).is_dir():
            compileall.compile_dir(repo / name, quiet=2, workers=0)


def _rewritten_by_pytest(path: Path, patterns: list[str]) -> bool:
    return path.name == "conftest.py" or any(fnmatch.fnmatch(path.name, p) for p in patterns)


def write_assert_rewrites(config) -> None:
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
        if getattr(state, "mode", None) != "rewrite":
            return
        patterns = config.getini("python_files")
        for root in config.getini("testpaths") or ["."]:
            for path in sorted((config.rootpath / root).rglob("*.py")):
                if not _rewritten_by_pytest(path, patterns):
                    continue
                pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
                if rewrite._read_pyc(path, pyc) is not None:
                    continue
                pyc.parent.mkdir(parents=True, exist_ok=True)
                source_hash, code = rewrite._rewrite_test(path, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
    except Exception:  # pytest's internals moved: the workers rewrite as they always could
        return
