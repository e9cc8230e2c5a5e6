"""libnvshare.so loads into programs of an old glibc (native/README.md promises x86_64 glibc >= 2.17).

The loader refuses a preloaded library that requires a symbol version its glibc does not define, so
a library built on glibc >= 2.34 that imports pthread_mutex_trylock@GLIBC_2.34 stops every program
of Ubuntu 20.04, UBI 8 or Amazon Linux 2 at start. Here: the versions the built library requires
(tools/check_glibc_floor.py), and a real run in an old userland: the mock driver's program, built
against that userland's glibc, started under chroot with the library preloaded, gated by a real
scheduler whose socket lies inside the root filesystem.

The run needs root (chroot) and a root filesystem made by `sudo tools/make_old_glibc_rootfs.sh`
(Ubuntu 16.04, glibc 2.23; XPUSHARE_OLD_GLIBC_ROOT names another); it is skipped, saying which is
missing, elsewhere.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .harness import REPO, App, Scheduler, build_artifacts, clean_env

FLOOR = (2, 17)
COMPAT_HEADER = REPO / "native" / "src" / "core" / "glibc_compat.h"


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_glibc_floor", REPO / "tools" / "check_glibc_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checker = _load_checker()


def test_the_library_needs_no_glibc_newer_than_2_17(nvshare_lib):
    too_new = checker.too_new(nvshare_lib, FLOOR)
    assert not too_new, (f"{nvshare_lib} requires {too_new}: programs with an older glibc cannot preload it; "
                         f"pin them in {COMPAT_HEADER.relative_to(REPO)}")
    libc = checker.required_versions(nvshare_lib)["libc.so.6"]
    assert "GLIBC_2.2.5" in libc and "pthread_mutex_trylock" in libc["GLIBC_2.2.5"]


def test_the_checker_sees_what_a_new_glibc_binds_by_default(tmp_path):
    """The same call built without the header binds to the newest version (on glibc >= 2.34)."""
    host = os.confstr("CS_GNU_LIBC_VERSION") or ""
    m = re.match(r"glibc (\d+)\.(\d+)", host)
    if not m or (int(m[1]), int(m[2])) < (2, 34):
        pytest.skip(f"this machine's glibc ({host or 'unknown'}) binds pthread_mutex_trylock to an old version anyway")
    src = tmp_path / "t.c"
    src.write_text("#include <pthread.h>\nint f(pthread_mutex_t *m) { return pthread_mutex_trylock(m); }\n")
    plain, pinned = tmp_path / "plain.so", tmp_path / "pinned.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", plain, src, "-pthread"], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-include", COMPAT_HEADER, "-o", pinned, src, "-pthread"], check=True)
    assert "pthread_mutex_trylock" in checker.too_new(plain, FLOOR).get("GLIBC_2.34", [])
    assert checker.too_new(pinned, FLOOR) == {}
    assert checker.main([str(plain)]) == 1 and checker.main([str(pinned)]) == 0


def _old_root() -> Path:
    if os.environ.get("XPUSHARE_OLD_GLIBC_ROOT"):
        return Path(os.environ["XPUSHARE_OLD_GLIBC_ROOT"])
    cache = Path(os.environ.get("XPUSHARE_TOOLS_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xpushare-tools")
    return cache / "rootfs-xenial"


def _root_glibc(root: Path) -> tuple[int, int]:
    found = sorted(root.glob("lib/x86_64-linux-gnu/libc-2.*.so"))
    if not found:
        pytest.skip(f"{root} has no lib/x86_64-linux-gnu/libc-2.N.so to tell its glibc version")
    m = re.search(r"libc-2\.(\d+)\.so", found[0].name)
    return (2, int(m[1]))


@pytest.fixture
def old_root():
    root = _old_root()
    if os.geteuid() != 0:
        pytest.skip("the old-glibc run needs root (chroot)")
    if shutil.which("chroot") is None:
        pytest.skip("chroot is not installed")
    if not (root / "usr" / "bin" / "env").exists() or not (root / "usr" / "lib" / "x86_64-linux-gnu" / "crt1.o").exists():
        pytest.skip(f"no old-glibc root filesystem with libc6-dev at {root}: make one with "
                    "`sudo tools/make_old_glibc_rootfs.sh` (or name one in XPUSHARE_OLD_GLIBC_ROOT)")
    version = _root_glibc(root)
    assert version < (2, 34), f"{root} has glibc {version}: not an old userland"
    work = Path(tempfile.mkdtemp(prefix="nvs-", dir=root / "tmp"))
    yield root, work
    shutil.rmtree(work, ignore_errors=True)


def _against(root: Path) -> list[str]:
    """gcc flags that compile and link against the root filesystem's headers and glibc. The host's
    gcc finds its own crt files and libraries by relative paths that --sysroot does not move, hence
    -B and -L; libdl.so there is an absolute symlink (dangling seen from here), hence -l:libdl.so.2."""
    lib, usrlib = root / "lib" / "x86_64-linux-gnu", root / "usr" / "lib" / "x86_64-linux-gnu"
    return [f"--sysroot={root}", f"-B{usrlib}/", f"-L{usrlib}", f"-L{lib}", "-l:libdl.so.2"]


def test_a_program_of_an_old_glibc_runs_with_the_library_preloaded(old_root, nvshare_lib):
    root, work = old_root
    inside = Path("/") / work.relative_to(root)
    artifacts = build_artifacts(work, *_against(root))
    assert checker.too_new(artifacts.app, _root_glibc(root)) == {}, "the program was not built against the old glibc"
    shutil.copy2(nvshare_lib, work / "libnvshare.so")
    sched = Scheduler(work / "sched.sock", work / "sched.log").start()
    try:
        env_inside = [f"LD_PRELOAD={inside}/libnvshare.so", f"LD_LIBRARY_PATH={inside}",
                      f"NVSHARE_SOCK_PATH={inside}/sched.sock", f"MOCK_CUDA_LOG={inside}/mock.log"]
        app = App(Path(shutil.which("chroot")),
                  [root, "/usr/bin/env", *env_inside, f"{inside}/cuda_app",
                   "init", "ctx", 0, "alloc", "1M", "launch", 1, "pause", "launch", 3, "verify"],
                  clean_env(), work / "app.stderr")
        try:
            app.paused(timeout=30)
            sched.wait_holder(app.pid)  # registered with the scheduler and gated by it
            app.resume()
            rc = app.finish(timeout=30)
        finally:
            app.close()
        assert rc == 0, f"exit {rc}: {app.stderr()}"
        assert "GLIBC" not in app.stderr() and "warning" not in app.stderr(), app.stderr()
        launches = [s for s in app.lines if s.get("step") == "launch"]
        assert [s["ret"] for s in launches] == [0, 0]
        assert [s.get("ok") for s in app.lines if s.get("step") == "verify"] == [True], app.lines
    finally:
        sched.stop()
