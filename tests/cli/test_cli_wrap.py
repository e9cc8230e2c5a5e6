"""Wrapped lines of nvsharectl top and status (issue 22, item 18): a GPU's head, memory, last switch
and `why:` lines wrap between words with a hanging indent under their label, and never part a
number from its unit (`switch 72 ms`, `TQ 30s`)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from test_cli_status_width import check_fits, ctl, live  # noqa: F401 (live: a fixture)
from xpushare.cli.ctl_render import render_status, wrap_hanging
from xpushare.cli.ctl_top import Tracker, render_frame

WHY = ("serial mode: one client at a time, 3 waiting; the next holder needs 12 GiB that idle "
       "clients hold, so 2 of them are asked to move 9 GiB to host first, which takes about 72 ms")
GPU = {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "NVIDIA H100 80GB HBM3",
       "mode": "serial", "operation": "serialised", "why": WHY, "tq": 30.0, "tq_source": "dynamic",
       "switch_cost": 0.072, "capacity": 80 << 30, "memory_total": 80 << 30, "used": 9 << 30,
       "holders": [], "queue": []}
UNIT = re.compile(r"\d$")  # a line that ends in a digit: its unit (if any) went to the next line


def _top(width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width).print(
        render_frame({"scheduler": {"pid": 1}, "gpus": [GPU], "clients": []}, Tracker(), width,
                     None, 0.0))
    return out.getvalue().splitlines()


def _block(lines: list[str], label: str, indent: int) -> list[str]:
    """The line that starts with `label` and the lines indented by `indent` that continue it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(label))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * indent) or line.lstrip().startswith(("mem ", "why:", "last ")):
            break
        block.append(line)
    return block


@pytest.mark.parametrize("width", [50, 60, 80])
def test_top_wraps_why_under_its_label_and_keeps_numbers_with_units(width):
    lines = _top(width)
    check_fits("\n".join(lines), width)
    why = _block(lines, "  why: ", 7)
    assert len(why) > 1
    assert all(line.startswith(" " * 7) and line[7] != " " for line in why[1:]), why
    assert " ".join(line.strip() for line in why) == f"why: {WHY}"
    head = _block(lines, "GPU 0", 2)
    assert any("switch 72 ms" in line for line in head), head
    assert all(line.startswith("  ") and line[2] != " " for line in head[1:]), head
    for line in why + head:
        assert not UNIT.search(line) or line.endswith(("GPU 0", "HBM3")), (line, lines)


def test_wrap_hanging_never_splits_a_number_from_its_unit():
    for width in range(12, 40):
        lines = wrap_hanging("  why: switch 72 ms, 12 GiB, 5 s and 3 waiting", width, 7)
        assert not any(UNIT.search(line) for line in lines), (width, lines)
        assert all(line.startswith(" " * 7) for line in lines[1:]), (width, lines)


def test_status_wraps_why_with_a_hanging_indent():
    out = io.StringIO()
    render_status({"scheduler": {}, "gpus": [GPU], "clients": []}, file=out, width=60)
    lines = out.getvalue().splitlines()
    why = _block(lines, "GPU 0: ", 2)
    assert len(why) > 1 and all(line.startswith("  ") for line in why[1:]), lines
    assert not any(UNIT.search(line) for line in why), why


def test_live_top_wraps_why_under_its_label(live):
    s, _ = live
    r = ctl(s.sock, "top", "--once", "--width", "40")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    why = _block(lines, "  why: ", 7)
    assert len(why) > 1 and all(line.startswith(" " * 7) for line in why[1:]), r.stdout
