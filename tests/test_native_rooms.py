"""native/src keeps its rooms (native/README.md, "Layout"): includes name the room, the headers'
include graph points one way, and the core header every file includes shows no room's functions.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "native" / "src"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Found on the include path but not under src/: the hand-declared CUDA/NVML types, the wire constants
# generated at build time.
OUTSIDE = {"nvshare_cuda.h", "nvshare_nvml.h", "nvs_contract.h"}
# What core/nvshare.h may include: the tables of entry points and driver calls, and the rooms'
# parts of the device and context records (data and locking rules, no functions of theirs).
CORE_MAY_INCLUDE = {"core/glibc_compat.h", "hooks/hooks.h", "hooks/driver.h", "gate/busydev.h",
                    "gate/holddev.h",
                    "gate/quotadev.h", "memory/footprint.h", "swap/swapdev.h", "swap/switchdev.h"}


def _sources() -> list[Path]:
    return sorted([*SRC.rglob("*.c"), *SRC.rglob("*.h")])


def _includes(path: Path) -> list[str]:
    return [i for i in INCLUDE.findall(path.read_text()) if i not in OUTSIDE]


def test_every_include_names_an_existing_file_by_its_room():
    wrong = [f"{p.relative_to(SRC)}: {i}" for p in _sources() for i in _includes(p)
             if "/" not in i or not (SRC / i).is_file()]
    assert wrong == []
    assert {p.parent.name for p in _sources()} == {"core", "hooks", "gate", "memory", "swap", "session"}


def test_the_headers_include_graph_has_no_circle():
    graph = {str(p.relative_to(SRC)): _includes(p) for p in SRC.rglob("*.h")}
    done: set[str] = set()

    def visit(h: str, path: tuple[str, ...]) -> None:
        assert h not in path, " -> ".join((*path, h))
        if h in done:
            return
        for i in graph[h]:
            visit(i, (*path, h))
        done.add(h)

    for h in graph:
        visit(h, ())


def test_the_core_header_includes_no_rooms_functions():
    seen, todo = set(), ["core/nvshare.h"]
    while todo:
        for i in _includes(SRC / todo.pop()):
            if i not in seen:
                seen.add(i)
                todo.append(i)
    assert seen <= CORE_MAY_INCLUDE, sorted(seen - CORE_MAY_INCLUDE)
    for h in CORE_MAY_INCLUDE - {"core/glibc_compat.h"}:
        assert _includes(SRC / h) == [], f"{h} is included by the core header: it may include nothing of ours"
