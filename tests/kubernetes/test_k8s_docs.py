"""docs/kubernetes.md's commands, run as written (paths moved into a temporary directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from .k8s_helpers import PKG_PARENT, REPO

DOC = REPO / "docs" / "kubernetes.md"
pytestmark = pytest.mark.timeout(60)


def block_after(text: str, words: str) -> str:
    """The first ```bash block after `words`."""
    start = text.index(words)
    return re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)


def test_the_device_plugins_by_hand_command_serves_its_socket(short_dir):
    script = block_after(DOC.read_text(), "Running it by hand without GPUs or a")
    script = (script.replace("/tmp/", f"{short_dir}/").replace("/path/to/libnvshare.so", f"{short_dir}/none.so")
              .replace("nvshare-device-plugin", f"{sys.executable} -m xpushare.kubernetes.plugin"))
    log = open(os.path.join(short_dir, "out"), "w+")
    proc = subprocess.Popen(["bash", "-ec", script], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=PKG_PARENT), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            out = open(log.name).read()
            if "waiting for the kubelet" in out or "cannot serve" in out:
                break
            time.sleep(0.05)
        out = open(log.name).read()
        # its first word on its socket: served, not a directory it waits for forever
        assert "serving on" in out and "waiting for the kubelet" in out and "cannot serve" not in out, out
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)
