"""deploy/systemd/nvshare-scheduler.service: pip puts nvshare-scheduler wherever the environment it
installs into keeps its scripts (a virtual environment's bin/, ~/.local/bin, /usr/local/bin), so
the unit names no fixed path: its documented install command writes the path of the
nvshare-scheduler on PATH into ExecStart."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "deploy" / "systemd" / "nvshare-scheduler.service"
INSTALL_DOC = REPO / "docs" / "install.md"


def _install_command() -> str:
    """The unit's own install line (its header comment), as docs/install.md gives it too."""
    (line,) = [ln[1:].strip() for ln in UNIT.read_text().splitlines() if ln.startswith("#   sed ")]
    return line


def _exec_start(text: str) -> str:
    (line,) = re.findall(r"^ExecStart=(.*)$", text, re.M)
    return line


def test_the_unit_names_no_fixed_path_for_the_scheduler():
    program = _exec_start(UNIT.read_text()).split()[0]
    assert program == "@NVSHARE_SCHEDULER@", f"ExecStart runs {program}: pip may have put it elsewhere"


def test_the_install_command_writes_the_installed_scheduler_into_execstart(tmp_path):
    command = _install_command()
    assert command in INSTALL_DOC.read_text(), "docs/install.md gives another install command"
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "nvshare-scheduler").write_text("#!/bin/sh\nexit 0\n")
    (venv_bin / "nvshare-scheduler").chmod(0o755)
    target = tmp_path / "nvshare-scheduler.service"
    # what the command writes, into target instead of /etc/systemd/system (no sudo here)
    local = re.sub(r"\| sudo tee \S+ >/dev/null$", f"> {target}", command)
    assert local != command
    subprocess.run(["bash", "-c", local], cwd=REPO, check=True,
                   env={"PATH": f"{venv_bin}:/usr/bin:/bin"})
    text = target.read_text()
    assert _exec_start(text) == f"{venv_bin}/nvshare-scheduler --socket /run/nvshare/scheduler.sock"
    assert text.replace(str(venv_bin / "nvshare-scheduler"), "@NVSHARE_SCHEDULER@", 1) == UNIT.read_text()
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the written unit was not verified by systemd")
    r = subprocess.run([analyze, "verify", str(target)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
