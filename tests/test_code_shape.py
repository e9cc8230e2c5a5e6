"""The shape the code keeps (docs/architecture.md): product files of about 400 lines at most, functions
of about 60 at most, each job in a room of its own.

A file or function may be longer only when it says why: a file whose first comment (docstring or
leading comment block) contains "long:", a function whose docstring or first comment (or the comment
right above it) does. Generated gRPC stubs are not ours to shape.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILE_LIMIT = 400   # lines, with some slack below: "about 400"
FUNCTION_LIMIT = 60
SLACK = 1.05
EXEMPT = re.compile(r"\blong:", re.IGNORECASE)


def _python_files() -> list[Path]:
    return sorted(p for p in (REPO / "src" / "xpushare").rglob("*.py")
                  if "_pb2" not in p.name)


def _c_files() -> list[Path]:
    src = REPO / "native" / "src"
    return sorted([*src.rglob("*.c"), *src.rglob("*.h")])


def _leading_comment(text: str) -> str:
    """A C file's first comment block, or a Python module's docstring."""
    m = re.match(r"\s*(/\*.*?\*/|\"\"\".*?\"\"\")", text, re.S)
    return m.group(1) if m else ""


def _python_functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            yield node.name, node.lineno, length, ast.get_docstring(node) or ""


def _strip_c(text: str) -> str:
    """C text with comments, strings and preprocessor lines blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])'", "''", text)
    lines = text.split("\n")
    in_macro = False
    for i, line in enumerate(lines):
        if in_macro or line.lstrip().startswith("#"):
            in_macro = line.rstrip().endswith("\\")
            lines[i] = ""
    return "\n".join(lines)


def _c_functions(path: Path):
    """(name, first line, length, the comments just above and at the top of its body) of every
    function definition: a top-level block whose header has a parameter list and no `=`."""
    raw = path.read_text().split("\n")
    code = _strip_c(path.read_text())
    depth, header_start, header = 0, 0, ""
    line = 0
    for pos, ch in enumerate(code):
        if ch == "\n":
            line += 1
        if depth == 0 and ch in ";}":
            header, header_start = "", None
            continue
        if depth == 0 and ch != "{":
            if header_start is None or not header.strip():
                header_start = line
            header += ch
            continue
        if ch == "{":
            if depth == 0:
                opened, head = line, header.strip()
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                m = re.search(r"(\w+)\s*\(", head)
                if m and "=" not in head and not re.match(r"(typedef|struct|enum|union)\b", head):
                    first = min(header_start if header_start is not None else opened, opened)
                    context = "\n".join(raw[max(0, first - 6):opened + 6])
                    yield m.group(1), first + 1, line - first + 1, context
                header, header_start = "", None


def _too_long_files() -> list[str]:
    found = []
    for path in _python_files() + _c_files():
        text = path.read_text()
        lines = text.count("\n")
        if lines > FILE_LIMIT * SLACK and not EXEMPT.search(_leading_comment(text)):
            found.append(f"{path.relative_to(REPO)}: {lines} lines")
    return found


def _too_long_functions() -> list[str]:
    found = []
    for path in _python_files():
        for name, line, length, doc in _python_functions(path):
            if length > FUNCTION_LIMIT * SLACK and not EXEMPT.search(doc):
                found.append(f"{path.relative_to(REPO)}:{line} {name}(): {length} lines")
    for path in [p for p in _c_files() if p.suffix == ".c"]:
        for name, line, length, context in _c_functions(path):
            if length > FUNCTION_LIMIT * SLACK and not EXEMPT.search(context):
                found.append(f"{path.relative_to(REPO)}:{line} {name}(): {length} lines")
    return found


def test_no_product_file_is_longer_than_about_400_lines():
    found = _too_long_files()
    assert not found, "split by job, or say why in the first comment ('long: ...'):\n" + "\n".join(found)


def test_no_function_is_longer_than_about_60_lines():
    found = _too_long_functions()
    assert not found, "split into named steps, or say why ('long: ...'):\n" + "\n".join(found)


@pytest.mark.parametrize("body_lines,expect", [(10, False), (80, True)])
def test_the_c_function_finder_sees_a_long_function(tmp_path, body_lines, expect):
    body = "\n".join(f"    x += {i};" for i in range(body_lines))
    path = tmp_path / "f.c"
    path.write_text("/* test */\n#include <x.h>\n\nstatic int f(int x,\n             int y)\n{\n"
                    f"{body}\n    return x;\n}}\n\nint g(void) {{ return 1; }}\n")
    names = {(name, length > FUNCTION_LIMIT * SLACK) for name, _, length, _ in _c_functions(path)}
    assert ("f", expect) in names and ("g", False) in names
