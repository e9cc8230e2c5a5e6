"""nvshare-device-plugin without the kubernetes extra, and its --version."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from xpushare import __version__

from .k8s_helpers import PKG_PARENT

# Runs the console script's entry point (`from xpushare.kubernetes.plugin import main`) with the
# named top-level packages made unimportable, as on a node where they were never installed.
ENTRY = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in sys.argv[1].split(",")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from xpushare.kubernetes.plugin import main
sys.exit(main(sys.argv[2:]))
"""

HINT = "python3 -m pip install 'xpushare[kubernetes]'"


def entry(blocked: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", ENTRY, blocked, *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("blocked", ["grpc", "google.protobuf", "grpc,google.protobuf"])
def test_missing_extra_names_the_install_command(blocked):
    r = entry(blocked, "--gpu-uuids", "GPU-11111111-2222-3333-4444-555555555555")
    assert r.returncode == 1, r.stderr
    assert HINT in r.stderr and "kubernetes extra" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_version_and_help_work_without_the_extra():
    r = entry("grpc,google.protobuf", "--version")
    assert r.returncode == 0 and r.stdout == f"nvshare-device-plugin {__version__}\n", r.stderr
    r = entry("grpc,google.protobuf", "--help")
    assert r.returncode == 0 and "nvshare.com/gpu" in r.stdout


def test_version_with_the_extra():
    r = entry("", "--version")
    assert r.returncode == 0 and r.stdout == f"nvshare-device-plugin {__version__}\n", r.stderr


def test_other_import_errors_are_not_hidden():
    r = entry("xpushare.kubernetes.service", "--version")
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr and HINT not in r.stderr
