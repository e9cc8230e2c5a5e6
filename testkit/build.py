"""The one build under test: native/ built from this checkout once per test run, whatever runs it.

The tests (in-process, their subprocesses, and each pytest-xdist worker) use the library built here
from native/, never an installed copy, so that an edit to native/src is tested by the next run. The
build goes to build/tests-native/ under an exclusive lock: the first process builds (cmake's own
dependency tracking makes a rebuild cheap), the others wait for it and find it done.

NVSHARE_LIBRARY, when set, names the library instead (the GPU machine tests an installed package).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "tests-native"


class BuildError(RuntimeError):
    pass


def _run(cmd: list, log) -> None:
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    r = subprocess.run([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT)
    if r.returncode:
        raise BuildError(f"{cmd[0]} failed (exit {r.returncode}); see {log.name}")


def native_library(build: Path = BUILD) -> Path:
    """libnvshare.so as built from native/ in this checkout (built now unless up to date)."""
    if os.environ.get("NVSHARE_LIBRARY"):
        return Path(os.environ["NVSHARE_LIBRARY"]).resolve()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake is needed to build native/ for the tests (pip install '.[test]' "
                         "installs it), or set NVSHARE_LIBRARY")
    build.mkdir(parents=True, exist_ok=True)
    with open(build / ".lock", "w") as lock, open(build / "build.log", "a") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others find its result
        if not (build / "CMakeCache.txt").exists():
            _run([cmake, "-S", REPO / "native", "-B", build, "-DCMAKE_BUILD_TYPE=Release"], log)
        _run([cmake, "--build", build, "-j", str(os.cpu_count() or 2)], log)
    found = sorted(build.rglob("libnvshare.so"))
    if not found:
        raise BuildError(f"the build in {build} produced no libnvshare.so")
    return found[0]
