"""bench/probes/checkpoint_pairs.py without a GPU: one whole run against the mock driver
(tests/mock/cuda/) on a node of two GPUs, so that the probe the lead runs on a two-GPU machine does
not fail on its first line: the child moves to GPU 1 with its bytes intact, the driver was handed
the mapping of both GPUs, and the child exits by itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.interposer.harness import build_mock_variant, clean_env

PROBE = Path(__file__).resolve().parents[2] / "bench" / "probes" / "checkpoint_pairs.py"


def uuid(phys: int) -> str:
    return f"GPU-00000000-0000-0000-0000-0000000000{phys:02x}"


def test_a_move_to_gpu_1_on_the_mock(tmp_path):
    lib = build_mock_variant(tmp_path / "mock")
    (tmp_path / "ckpt").mkdir()
    env = clean_env(LD_LIBRARY_PATH=lib, MOCK_CUDA_DEVICES=2, MOCK_CUDA_CHECKPOINT_DIR=tmp_path / "ckpt")
    out = tmp_path / "pairs.json"
    subprocess.run([sys.executable, str(PROBE), "--to", "1", "--json", str(out)], env=env, check=True,
                   capture_output=True, timeout=60)
    result = json.loads(out.read_text())
    assert result["mapping"] == [[uuid(0), uuid(1)], [uuid(1), uuid(0)]]
    assert result["suspend"]["ok"] and result["restore_with_pair"]["moved"] is True
    assert result["after"][:3] == ["CHECK", "1", uuid(1)], "on GPU 1, its bytes intact"
    assert result["exit"] == 0 and "stuck" not in result
