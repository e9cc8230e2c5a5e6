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


def test_the_dra_plugins_probe_without_the_extra_names_the_install_command():
    r = subprocess.run([sys.executable, "-c", ENTRY.replace("xpushare.kubernetes.plugin",
                                                            "xpushare.kubernetes.dra.main"),
                        "grpc,google.protobuf", "--probe"],
                       env=dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", "")),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and HINT in r.stderr and "--probe" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_bad_gpu_list_in_the_environment_is_a_usage_error_naming_the_variable():
    env = dict(os.environ, NVSHARE_GPU_UUIDS="bad",
               PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for module in ("xpushare.kubernetes.plugin", "xpushare.kubernetes.dra.main"):
        r = subprocess.run([sys.executable, "-m", module, "--dry-run"] if "dra" in module
                           else [sys.executable, "-m", module], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, (module, r.stderr)
        assert "NVSHARE_GPU_UUIDS='bad'" in r.stderr and "not a GPU UUID" in r.stderr, r.stderr


def test_the_help_says_what_becomes_of_an_unhealthy_gpu_and_what_debug_does():
    from xpushare.kubernetes.dra.cli import build_parser as dra_parser
    from xpushare.kubernetes.plugin_cli import build_parser

    def help_of(parser, flag):
        (action,) = [a for a in parser._actions if flag in a.option_strings]
        return action.help or ""

    assert "listed Unhealthy" in help_of(build_parser(), "--nvml-health")
    assert "leaves the slice" in help_of(dra_parser(), "--nvml-health")
    for parser in (build_parser(), dra_parser()):
        assert "debug" in help_of(parser, "--debug")
