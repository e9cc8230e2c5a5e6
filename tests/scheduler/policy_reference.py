"""The scheduling policy as it stood before its data structures were reworked for a cost independent
of the queue length, read from git history (commit REFERENCE_COMMIT) rather than kept as a copy in
the tree: the oracle of test_policy_differential.py, and what test_policy_cost.py shows the product
no longer is (POLICY_COST_AGAINST=reference).

It is materialised as the package `reference_policy` in a temporary directory, with its relative
import of xpushare.wire.protocol made absolute. Without git or that commit (a tarball, a shallow clone)
the tests that need it are skipped, saying why.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
REFERENCE_COMMIT = "ceb2232f9d312a71a0bf9bb12871222184a4eb93"
FILES = ("__init__", "model", "snapshot", "strategies", "arbiter")
NAME = "reference_policy"


def load() -> ModuleType:
    """The reference policy package; pytest.skip when git history does not have it."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    root = Path(tempfile.mkdtemp(prefix="policy-reference-")) / NAME
    root.mkdir()
    for name in FILES:
        try:
            r = subprocess.run(["git", "-C", str(REPO), "show",
                                f"{REFERENCE_COMMIT}:src/xpushare/scheduler/policy/{name}.py"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"the reference policy needs git: {e}", allow_module_level=True)
        if r.returncode != 0:
            pytest.skip(f"the reference policy ({REFERENCE_COMMIT[:7]}) is not in this checkout's "
                        f"history: {r.stderr.strip()}", allow_module_level=True)
        (root / f"{name}.py").write_text(r.stdout.replace("from ...protocol import",
                                                          "from xpushare.wire.protocol import"))
    spec = importlib.util.spec_from_file_location(NAME, root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module
