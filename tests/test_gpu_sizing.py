"""tests/gpu is sized to the card (testkit.gpu.min_free_mib): a 24 GiB card with nothing else on it
runs the tests; a card someone else is using does not, and the reason says what is needed. (The GPU
tests themselves are not run here: no GPU.)"""

import subprocess
from pathlib import Path

from testkit import gpu

GIB_MIB = 1024
SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_validate.sh"


def test_a_smaller_card_needs_three_quarters_of_it_free():
    assert gpu.min_free_mib(24 * GIB_MIB) == 18 * GIB_MIB
    assert gpu.min_free_mib(16 * GIB_MIB) == 12 * GIB_MIB
    assert gpu.min_free_mib(80 * GIB_MIB) == 32 * GIB_MIB
    assert gpu.min_free_mib(141 * GIB_MIB) == 32 * GIB_MIB


def test_an_idle_24_gib_card_runs_the_tests_and_a_busy_one_says_what_is_needed(monkeypatch):
    monkeypatch.setattr(gpu, "gpu_memory_mib", lambda: (23 * GIB_MIB, 24 * GIB_MIB))
    assert gpu.gpu_headroom_problem() is None
    monkeypatch.setattr(gpu, "gpu_memory_mib", lambda: (10 * GIB_MIB, 24 * GIB_MIB))
    problem = gpu.gpu_headroom_problem()
    assert problem.startswith("only 10240 MiB of 24576 MiB GPU memory is free (need 18432 MiB")


def test_gpu_validate_sizes_the_tests_to_the_card_too(tmp_path):
    """The script's rule, run with a fake nvidia-smi (a 24 GiB card, 20 GiB free): it goes past the
    safety check (and stops at the install, which has nothing to install from here)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$*\" in *memory.free,memory.total*) echo '20480, 24576';; "
                   "*) echo fake;; esac\n")
    smi.chmod(0o755)
    fake_python = tmp_path / "python3"
    fake_python.write_text("#!/bin/sh\nexit 1\n")
    fake_python.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "OUT": str(tmp_path / "out"),
           "PYTHON": str(fake_python)}
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                       timeout=60)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "REFUSED" not in summary, summary
    assert "benchmarks left out: 20480 MiB free, they need 49152; running the tests" in summary
    assert "FAILED: install" in summary and r.returncode == 1
    smi.write_text("#!/bin/sh\ncase \"$*\" in *memory.free,memory.total*) echo '8192, 24576';; "
                   "*) echo fake;; esac\n")
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3 and "the tests need 18432" in (tmp_path / "out" / "summary.txt").read_text()
