"""Shared pytest setup: the in-tree Python package is used when xpushare is not installed
(`pip install .` puts it, with its native library, into the environment; a plain checkout works too)."""

import sys
from pathlib import Path

try:
    import xpushare  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
