"""native/src/session/protocol.h and xpushare.wire describe the same wire format, and the C side's constants
come from the Python side (xpushare/wire/cheader.py generates nvs_contract.h at build time).

protocol.h is compiled on its own with the generated header: its NVS_CONTRACT_LAYOUT_CHECKS assert
every payload's size and field offsets, so a struct that drifts from messages.py does not build (a
header whose checks were altered is shown to fail). A program then prints what the C preprocessor
sees of each constant and field, which must be what the contract says; and every struct protocol.h
declares must be one the checks cover.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from xpushare.wire import cheader
from xpushare.wire import protocol as P

ROOT = Path(__file__).resolve().parents[1]
HEADER_H = ROOT / "native" / "src" / "session" / "protocol.h"


def _program() -> str:
    lines = ['#include <stdio.h>', '#include <stddef.h>', f'#include "{HEADER_H}"',
             "int main(void) {", 'printf("{\\"structs\\": {");']
    for i, (struct, fields) in enumerate(cheader.STRUCTS.items()):
        lines.append(f'printf("%s\\"{struct}\\": {{\\"sizeof\\": %zu, \\"fields\\": {{", '
                     f'"{", " if i else ""}", sizeof(struct {struct}));')
        for j, (name, _) in enumerate(fields):
            lines.append(f'printf("%s\\"{name}\\": [%zu, %zu]", "{", " if j else ""}", '
                         f'offsetof(struct {struct}, {name}), '
                         f'sizeof(((struct {struct} *)0)->{name}));')
        lines.append('printf("}}");')
    lines.append('printf("}, \\"enum\\": {");')
    for i, t in enumerate(P.MessageType):
        lines.append(f'printf("%s\\"{t.name}\\": %d", "{", " if i else ""}", (int)NVS_{t.name});')
    lines.append('printf("}, \\"macros\\": {");')
    for i, name in enumerate(cheader.constants()):
        lines.append(f'printf("%s\\"{name}\\": %lld", "{", " if i else ""}", (long long){name});')
    lines += ['printf("}}\\n");', "return 0; }"]
    return "\n".join(lines)


def _compile(d: Path, contract: str, source: str) -> subprocess.CompletedProcess:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    (d / "nvs_contract.h").write_text(contract)
    (d / "dump.c").write_text(source)
    return subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{d}", "-o", str(d / "dump"),
                           str(d / "dump.c")], capture_output=True, text=True)


@pytest.fixture(scope="module")
def c_side(tmp_path_factory):
    d = tmp_path_factory.mktemp("agreement")
    r = _compile(d, cheader.header(), _program())
    assert r.returncode == 0, f"protocol.h does not match the contract:\n{r.stderr}"
    return json.loads(subprocess.run([str(d / "dump")], capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("struct", sorted(cheader.STRUCTS))
def test_struct_sizes_and_offsets_agree(c_side, struct):
    fields = cheader.STRUCTS[struct]
    c = c_side["structs"][struct]
    layout = P.field_layout(fields)
    assert c["sizeof"] == sum(size for _, size in layout.values())
    assert {k: tuple(v) for k, v in c["fields"].items()} == layout


def test_message_types_agree(c_side):
    assert c_side["enum"] == {t.name: t.value for t in P.MessageType}


def test_constants_are_the_contracts(c_side):
    assert c_side["macros"] == cheader.constants()
    assert c_side["macros"]["NVS_PRIORITY_LIMIT"] == P.PRIORITY_LIMIT


def test_every_struct_of_the_header_is_checked():
    declared = set(re.findall(r"^struct (nvs_\w+) \{", HEADER_H.read_text(), re.M))
    assert declared == set(cheader.STRUCTS)


def test_a_struct_that_drifts_does_not_build(tmp_path):
    """The layout checks bite: a contract that says nvs_hello is a byte longer, or that its
    priority sits elsewhere, fails to compile with protocol.h as it is."""
    source = f'#include "{HEADER_H}"\nint main(void) {{ return 0; }}\n'
    assert _compile(tmp_path, cheader.header(), source).returncode == 0
    for before, after in (("sizeof(struct nvs_hello) == 520", "sizeof(struct nvs_hello) == 521"),
                          ("offsetof(struct nvs_hello, priority) == ",
                           "1 + offsetof(struct nvs_hello, priority) == ")):
        altered = cheader.header().replace(before, after)
        assert altered != cheader.header(), before
        r = _compile(tmp_path, altered, source)
        assert r.returncode != 0 and "nvs_hello" in r.stderr


def test_the_generator_writes_only_a_changed_header(tmp_path):
    out = tmp_path / "nvs_contract.h"
    assert cheader.main([str(out)]) == 0 and out.read_text() == cheader.header()
    before = out.stat().st_mtime_ns
    assert cheader.main([str(out)]) == 0 and out.stat().st_mtime_ns == before
    assert cheader.main([]) == 2


def test_documented_sizes():
    """docs/protocol.md gives exact sizes; both sides are also checked against them."""
    sizes = {s: sum(n for _, n in P.field_layout(f).values()) for s, f in cheader.STRUCTS.items()}
    assert sizes == {
        "nvs_header": 12, "nvs_hello": 520, "nvs_welcome": 16, "nvs_attach": 168,
        "nvs_attached": 16, "nvs_device": 8, "nvs_grant": 16, "nvs_drop": 16, "nvs_released": 24,
        "nvs_mem_update": 24, "nvs_busy": 16, "nvs_settings": 16, "nvs_limits": 16, "nvs_job": 276,
        "nvs_evict": 16, "nvs_residency": 32, "nvs_span": 24,
        "nvs_busy_spans": 400, "nvs_suspend": 8, "nvs_suspend_ready": 8, "nvs_resumed": 8,
        "nvs_resume_req": 8, "nvs_queue_bound": 8,
        "nvs_hold": 8, "nvs_bursts": 8, "nvs_burst": 8,
        "nvs_prepare_swap": 8, "nvs_waiters": 8}
    assert P.MAGIC.to_bytes(4, "little") == b"NVSH"
