"""The two size parsers agree: every edge of tests/size_edges.py means the same bytes, or is
refused, by xpushare.wire.sizes and by the library (NVSHARE_GPU_MEMORY, read by config.c's
nvs_parse_size; the size shows as the device's total memory where it is under the mock GPU's 16 GiB),
and both say the same of a size they refuse: xpushare.wire.sizes.SIZE_EXPECTED, which the
library's warning quotes through the generated nvs_contract.h."""

from __future__ import annotations

import pytest

from tests.size_edges import SIZE_EDGES
from xpushare.wire.sizes import SIZE_EXPECTED, parse_size

MOCK_TOTAL = 16 << 30  # the mock driver's device memory


def _python(text: str):
    try:
        return parse_size(text)
    except ValueError as e:
        assert str(e) == f"invalid size {text!r}: expected {SIZE_EXPECTED}"
        return None


@pytest.mark.parametrize("text, size", SIZE_EDGES, ids=repr)
def test_both_parsers_read_each_edge_alike(world, text, size):
    assert _python(text) == size, "xpushare.wire.sizes disagrees with the table"
    if "\0" in text or not text:
        return  # an empty variable is unset, not refused (both sides)
    app = world.run("init", "ctx", 0, "totalmem", 0, env={"NVSHARE_GPU_MEMORY": text})
    warnings = [ln for ln in app.stderr().splitlines() if "NVSHARE_GPU_MEMORY" in ln]
    (total,) = [line["total"] for line in app.lines if line["step"] == "totalmem"]
    if size is None:
        assert warnings == [f'nvshare[{app.pid}]: warning: ignoring NVSHARE_GPU_MEMORY="{text}": '
                            f"expected {SIZE_EXPECTED}"]
        assert total == MOCK_TOTAL
    else:
        assert warnings == []
        if 0 < size <= MOCK_TOTAL:
            assert total == size


def test_the_scheduler_refuses_a_size_past_64_bits_as_the_library_does():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "xpushare.scheduler", "--no-nvml", "--gpu-memory",
                        "16777216T"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"expected {SIZE_EXPECTED}" in r.stderr
