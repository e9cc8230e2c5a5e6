"""The interposer's table of entry points, read from native/src/hooks/hooks.h (the one source of truth).

hooks.h lists every intercepted entry point once, as
    X(kind, name, base, ver, variants, (params), (args), stream)
kind GATE marks work submission (the wrapper takes the device lock); variants PTSZ/PTDS adds the
per-thread-default-stream twin name##_ptsz / name##_ptds. The tests derive their gated set from it
(harness.is_gated); test_gated_agreement.py checks this reading against the C preprocessor's, and
the test app's and the mock driver's tables against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOOKS_H = REPO / "native" / "src" / "hooks" / "hooks.h"
NATIVE_INCLUDE = REPO / "native" / "include"
APP_API_H = REPO / "tests" / "mock" / "cuda_app" / "api.h"

TWIN = {"NONE": None, "PTSZ": "_ptsz", "PTDS": "_ptds"}
GATED_KINDS = ("GATE", "LAUNCH")  # both take the device lock; a LAUNCH also opens busy spans
_LINE = re.compile(r"X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*(\w+)\s*,")


@dataclass(frozen=True)
class Hook:
    kind: str      # GATE | CUSTOM | SYNC
    name: str      # the legacy-stream variant's exported name
    base: str      # the name cuGetProcAddress is asked for
    ver: int
    variants: str  # NONE | PTSZ | PTDS

    @property
    def twin(self) -> str | None:
        """The per-thread-default-stream variant's name, if the line has one."""
        suffix = TWIN[self.variants]
        return self.name + suffix if suffix else None

    @property
    def exported(self) -> tuple[str, ...]:
        return (self.name,) if self.twin is None else (self.name, self.twin)


def _macro_body(text: str) -> str:
    """The lines of `#define NVS_HOOKS(X)`, up to the first one without a continuation."""
    lines = text[text.index("#define NVS_HOOKS(X)"):].splitlines()
    body = []
    for line in lines:
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return "\n".join(body)


def hooks(path: Path = HOOKS_H) -> list[Hook]:
    """Every line of NVS_HOOKS, in order."""
    body = _macro_body(path.read_text())
    rows = [Hook(kind, name, base, int(ver), variants)
            for kind, name, base, ver, variants in _LINE.findall(body)]
    assert len(rows) == len(re.findall(r"\bX\(", body)), "a NVS_HOOKS line this reader does not parse"
    assert all(h.kind in ("GATE", "LAUNCH", "CUSTOM", "SYNC") and h.variants in TWIN for h in rows), rows
    return rows


def gated_names(path: Path = HOOKS_H) -> frozenset[str]:
    """The exported names (every variant) of the gated entry points."""
    return frozenset(n for h in hooks(path) if h.kind in GATED_KINDS for n in h.exported)


def app_gated_table(path: Path = APP_API_H) -> list[tuple[str, str, str]]:
    """(slot, legacy name, per-thread name) of every gated entry point of cuda_app's GATED table
    (tests/mock/cuda_app/api.h)."""
    src = path.read_text()
    block = src[src.index("#define GATED(X)"):]
    block = block[:block.index("\n\n")]
    rows = re.findall(r"X\((\w+),[\s\\]*(\w+),[\s\\]*(\w+),[\s\\]*(\w+),[\s\\]*(\d+)\)", block)
    assert len(rows) == block.count("X(")
    return [(slot, legacy, pt) for slot, legacy, pt, _base, _ver in rows]
