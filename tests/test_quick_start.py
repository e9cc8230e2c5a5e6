"""The README's two set-up commands (on a fresh machine they do all the set-up): each makes and uses
a virtual environment, the main job's installs everything the main job imports, and .ci/run runs
the test command."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy pip carries
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# import name -> distribution name, where they differ
DISTRIBUTION = {"pynvml": "nvidia-ml-py", "yaml": "pyyaml"}


VENV = "python3 -m venv .venv && . .venv/bin/activate && "


def _commands() -> list[str]:
    """The README's set-up commands: the lines of its code blocks that pip-install this checkout."""
    return re.findall(r"^((?:python3 -m venv .*)?python3 -m pip install '\.\[.*)$", README, re.M)


def _requirement_names(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].strip().lower() for s in specs}


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "xpushare"}


def test_the_main_job_command_installs_what_the_main_job_imports():
    main = next(c for c in _commands() if "nvshare-run" in c)
    script = REPO / re.search(r"nvshare-run -- python3 (\S+)", main)[1]
    extras = re.search(r"install '\.\[([\w,-]+)\]'", main)
    project = PYPROJECT["project"]
    installed = _requirement_names(project["dependencies"])
    for extra in (extras[1].split(",") if extras else []):
        installed |= _requirement_names(project["optional-dependencies"][extra])
    needed = {DISTRIBUTION.get(n, n).lower() for n in _third_party_imports(script)}
    assert needed, script
    assert needed <= installed, f"{main!r} leaves out {sorted(needed - installed)}"
    # what it calls beyond imports: tensor.numpy() needs NumPy, which PyTorch does not install
    if ".numpy()" in script.read_text():
        assert "numpy" in installed, f"{main!r} leaves out numpy ({script.name} calls .numpy())"


def test_both_commands_install_into_a_virtual_environment_they_make():
    """Debian 12 and Ubuntu 24.04 refuse pip outside a virtual environment
    (externally-managed-environment): each command makes one and activates it before pip runs."""
    commands = _commands()
    assert len(commands) == 2, commands
    for command in commands:
        assert command.startswith(VENV), f"{command!r} runs pip outside a virtual environment"


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in _commands() if "[test]" in c)
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
