"""Which way the product's dependencies point (docs/architecture.md):

- xpushare.wire, the contract, depends on nothing else of xpushare;
- the scheduler never imports the Kubernetes code: its entry point (scheduler/__main__.py) hands it
  the node's pods;
- the command-line tools (xpushare.cli: nvsharectl, nvshare-run) import neither the scheduler nor the Kubernetes
  code, only the contract and their own modules.

Read from the source (every import statement, at any depth in a module), and checked by loading
nvsharectl too: what it loads is what its users wait for.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "xpushare"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, tree: ast.AST | None = None) -> set[str]:
    """The xpushare modules `path` (or `tree`, parsed from it) imports, relative imports resolved."""
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x`
    return {m for m in found if m == "xpushare" or m.startswith("xpushare.")}


MODULES = {_module(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py")) if "_pb2" not in p.name}
CLI = sorted(m for m in MODULES if m.startswith("xpushare.cli."))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _offending(importers, forbidden) -> dict:
    return {m: sorted(i for i in MODULES[m] if any(_within(i, f) for f in forbidden))
            for m in importers if any(_within(i, f) for i in MODULES[m] for f in forbidden)}


def test_the_modules_are_found():
    assert {"xpushare.wire.messages", "xpushare.scheduler.shell.server", "xpushare.cli.ctl"} <= MODULES.keys()
    assert {"xpushare.cli.run", "xpushare.cli.client", "xpushare.cli.ctl_top"} <= set(CLI)
    assert "xpushare.wire.protocol" in MODULES["xpushare.scheduler.shell.server"] or any(
        _within(i, "xpushare.wire") for i in MODULES["xpushare.scheduler.shell.server"])


def test_the_contract_depends_on_nothing_else_of_xpushare():
    wire = [m for m in MODULES if _within(m, "xpushare.wire")]
    bad = {m: sorted(i for i in MODULES[m] if not _within(i, "xpushare.wire") and i != "xpushare")
           for m in wire}
    assert not {m: i for m, i in bad.items() if i}


def test_the_scheduler_imports_no_kubernetes_code_but_at_its_entry_point():
    scheduler = [m for m in MODULES if _within(m, "xpushare.scheduler")
                 and m != "xpushare.scheduler.__main__"]
    assert not _offending(scheduler, ["xpushare.kubernetes"])


@pytest.mark.parametrize("module", CLI)
def test_the_command_line_tools_import_neither_the_scheduler_nor_kubernetes(module):
    assert not _offending([module], ["xpushare.scheduler", "xpushare.kubernetes"])


def test_nvsharectl_loads_no_scheduler_module():
    code = ("import sys, xpushare.cli.ctl; "
            "print(sorted(m for m in sys.modules if m.startswith(('xpushare.scheduler', "
            "'xpushare.kubernetes'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _bench_imports() -> dict[str, set[str]]:
    """bench's modules (dotted: bench.core.render) and the bench modules each imports."""
    root = PACKAGE.parents[1]
    files = {".".join(p.relative_to(root).with_suffix("").parts): p
             for p in (root / "bench").rglob("*.py") if p.name != "__init__.py"}
    graph = {}
    for name, p in files.items():
        found = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = found & files.keys() - {name}
    return graph


def test_no_benchmark_modules_import_each_other_in_a_circle():
    graph, done, path = _bench_imports(), set(), []

    def visit(name):
        assert name not in path, f"bench/ imports in a circle: {' -> '.join(path + [name])}"
        if name in done:
            return
        path.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        path.pop()
        done.add(name)

    assert graph["bench.scheduling.makespan_fit"] and graph["bench.run_all"]  # the graph is read
    for name in sorted(graph):
        visit(name)


def test_benchmark_rooms_import_only_core_and_themselves():
    """bench/<room>/ may use bench/core/ and its own room; core uses no room; the runner and the
    probes sit above them all."""
    for name, deps in _bench_imports().items():
        parts = name.split(".")
        if len(parts) != 3 or parts[1] == "probes":
            continue
        room = parts[1]
        allowed = {"core"} if room == "core" else {"core", room}
        wrong = sorted(d for d in deps if d.split(".")[1] not in allowed)
        assert not wrong, f"{name} imports {wrong}"


ROOMS = ["shell", "exporter", "control", "node", "policy"]  # each imports only rooms to its right


def _runtime_imports(path: Path) -> set[str]:
    """_imports without those under `if TYPE_CHECKING:` (annotations, not dependencies)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    kept = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            and id(n) not in typing_only]
    return _imports(path, ast.Module(body=kept, type_ignores=[]))


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["xpushare", "scheduler"] \
        and parts[2] in ROOMS else None


def test_the_schedulers_rooms_import_one_way():
    bad = {}
    for path in sorted((PACKAGE / "scheduler").rglob("*.py")):
        mine = _room(_module(path))
        if mine is None:
            continue
        allowed = set(ROOMS[ROOMS.index(mine):])
        wrong = sorted(i for i in _runtime_imports(path) if _room(i) not in allowed | {None})
        if wrong:
            bad[_module(path)] = wrong
    assert not bad
    assert any(_room(i) == "node" for i in _runtime_imports(PACKAGE / "scheduler" / "control" / "ops.py"))
