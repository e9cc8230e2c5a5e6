"""Environment defaults of flags are held to what the flag accepts: a bad value is a usage error
(exit 2) that names the variable, and a flag given on the command line wins over it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sched_harness import child_env
from xpushare.envflags import parse_args
from xpushare.kubernetes.plugin_cli import build_parser


@pytest.mark.parametrize("name, value, flag, why", [
    ("NVSHARE_NVML_HEALTH", "maybe", "--nvml-health", "expected one of auto, on, off"),
    ("NVSHARE_PLUGIN_METRICS_PORT", "abc", "--metrics-port", "not a port number: 'abc'"),
    ("NVSHARE_VIRTUAL_DEVICES", "0", "--virtual-devices", "must be between 1 and 1000: 0"),
])
def test_a_bad_environment_default_of_the_device_plugin_is_a_usage_error(monkeypatch, capsys, name,
                                                                        value, flag, why):
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as e:
        parse_args(build_parser(), [])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{name}={value!r} (the default of {flag}): {why}" in err, err


def test_a_flag_given_wins_over_a_bad_variable(monkeypatch):
    monkeypatch.setenv("NVSHARE_NVML_HEALTH", "maybe")
    assert parse_args(build_parser(), ["--nvml-health=off"]).nvml_health == "off"


def test_good_environment_defaults_apply(monkeypatch):
    monkeypatch.setenv("NVSHARE_NVML_HEALTH", "on")
    monkeypatch.setenv("NVSHARE_VIRTUAL_DEVICES", "4")
    args = parse_args(build_parser(), [])
    assert (args.nvml_health, args.virtual_devices) == ("on", 4)


def test_the_scheduler_names_a_bad_metrics_port_variable():
    r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--no-nvml"],
                       env=child_env({"NVSHARE_METRICS_PORT": "abc"}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "NVSHARE_METRICS_PORT='abc' (the default of --metrics-port): not a port number" in r.stderr
