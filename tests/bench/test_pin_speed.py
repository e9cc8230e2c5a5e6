"""bench/probes/pin_speed.py without a GPU: its flags, its table, and one whole run against the
mock driver (tests/mock/cuda/) with a small size, so that what the lead runs on the GPU
machine does not fail on its first line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.interposer.harness import build_mock_variant

PROBE = Path(__file__).resolve().parents[2] / "bench" / "probes" / "pin_speed.py"


def _probe():
    spec = importlib.util.spec_from_file_location("pin_speed", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # loads no driver: that happens in run_gpu only
    return mod


def test_the_size_defaults_to_8_gib_and_more_than_16_is_refused_with_usage(capsys):
    probe = _probe()
    assert probe.parse_args([]).gib == 8 and probe.parse_args([]).piece_mib == 256
    for bad in (["--gib", "17"], ["--gib", "0"], ["--piece-mib", "3"], ["--repeat", "0"]):
        with pytest.raises(SystemExit) as e:
            probe.parse_args(bad)
        assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_the_table_gives_each_variant_its_ratio_to_the_reference_copy():
    probe = _probe()
    result = {"gib": 8.0, "piece_mib": 256, "reference_d2h_ms": 156.0, "thp": "always",
              "variants": [{"name": "hostalloc-one", "threads": 1, "ms": 5200.0, "free_ms": 900.0},
                           {"name": "pipeline-register-4", "threads": 4, "ms": 195.0, "free_ms": 40.0},
                           {"name": "register-8", "threads": 8, "error": "cuMemHostRegister: 2"}]}
    lines = probe.table(result).splitlines()
    assert "156.0 ms" in lines[0] and "256 MiB" in lines[0]
    one = next(ln for ln in lines if ln.startswith("hostalloc-one")).split()
    assert one[2] == "5200.0" and one[4] == "0.030"
    pipe = next(ln for ln in lines if ln.startswith("pipeline-register-4")).split()
    assert pipe[4] == "0.800"
    assert "error: cuMemHostRegister: 2" in next(ln for ln in lines if ln.startswith("register-8"))


def test_a_small_run_on_the_mock_driver_measures_every_variant(tmp_path):
    lib = build_mock_variant(tmp_path / "mock")
    out = tmp_path / "pin.json"
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
    r = subprocess.run([sys.executable, str(PROBE), "--gib", "0.0625", "--piece-mib", "16", "--repeat", "1",
                        "--json", str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    names = [v["name"] for v in result["variants"]]
    assert names == [n for n, _ in _probe().variant_names()]
    assert all("error" not in v and v["ratio"] > 0 for v in result["variants"]), result["variants"]
    assert "reference/measured" in r.stdout and "pipeline-register-4" in r.stdout
