"""nvsharectl run as a call of its main() in the test's process, giving what its process would:
a start of the interpreter costs more CPU than the whole command (tests/cli/test_cli_usage.py and
test_cli_papercuts.py run the module as a process)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess

from xpushare.cli import ctl as ctl_mod


def ctl_call(argv) -> subprocess.CompletedProcess:
    """Exit status (argparse's SystemExit too), stdout and stderr, in the environment a child
    gets (sched_harness.child_env: no NVSHARE_SOCK_PATH)."""
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("NVSHARE_SOCK_PATH", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = ctl_mod.main(list(argv))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        if saved is not None:
            os.environ["NVSHARE_SOCK_PATH"] = saved
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())
