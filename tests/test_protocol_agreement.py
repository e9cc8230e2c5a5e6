"""native/src/protocol.h and xpushare.wire.protocol describe the same wire format.

A C program generated from the Python definitions includes the header on its own (only <stdint.h>)
and prints sizeof/offsetof of every field, the enum values and the constants; they must match. A
field or type that exists in Python but not in C fails to compile, which fails the test too.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from xpushare.wire import protocol as P  # noqa: E402

HEADER_H = ROOT / "native" / "src" / "protocol.h"

STRUCTS = {  # C struct -> (Python field list, Python size)
    "nvs_header": (P.HEADER_FIELDS, P.HEADER.size),
    "nvs_hello": (P.Hello.FIELDS, P.Hello.SIZE),
    "nvs_welcome": (P.Welcome.FIELDS, P.Welcome.SIZE),
    "nvs_attach": (P.Attach.FIELDS, P.Attach.SIZE),
    "nvs_attached": (P.Attached.FIELDS, P.Attached.SIZE),
    "nvs_device": (P.LockRequest.FIELDS, P.LockRequest.SIZE),
    "nvs_grant": (P.Grant.FIELDS, P.Grant.SIZE),
    "nvs_drop": (P.DropLock.FIELDS, P.DropLock.SIZE),
    "nvs_released": (P.Released.FIELDS, P.Released.SIZE),
    "nvs_mem_update": (P.MemUpdate.FIELDS, P.MemUpdate.SIZE),
    "nvs_busy": (P.BusyUpdate.FIELDS, P.BusyUpdate.SIZE),
    "nvs_settings": (P.Settings.FIELDS, P.Settings.SIZE),
    "nvs_limits": (P.Limits.FIELDS, P.Limits.SIZE),
    "nvs_job": (P.Job.FIELDS, P.Job.SIZE),
    "nvs_evict": (P.Evict.FIELDS, P.Evict.SIZE),
    "nvs_residency": (P.Residency.FIELDS, P.Residency.SIZE),
}
OPTIONAL_MACROS = {  # compared when the header defines them
    "NVS_HELLO_REQUIRE_SCHEDULER": P.HELLO_REQUIRE_SCHEDULER,
    "NVS_DROP_QUANTUM": P.DropReason.QUANTUM, "NVS_DROP_PREEMPTED": P.DropReason.PREEMPTED,
    "NVS_DROP_ADMIN": P.DropReason.ADMIN, "NVS_DROP_MEMORY": P.DropReason.MEMORY,
    "NVS_GRANT_PREFETCH": P.GRANT_PREFETCH, "NVS_DROP_EVICT": P.DROP_EVICT,
    "NVS_DROP_GANG": P.DROP_GANG,
    "NVS_RELEASE_DROPPED": P.ReleaseReason.DROPPED, "NVS_RELEASE_IDLE": P.ReleaseReason.IDLE,
}
REQUIRED_MACROS = {  # the header must define these
    "NVS_FEATURE_BUSY": P.FEATURE_BUSY,
    "NVS_FEATURE_QUOTAS": P.FEATURE_QUOTAS,
    "NVS_FEATURE_JOBS": P.FEATURE_JOBS,
    "NVS_FEATURE_SWAP": P.FEATURE_SWAP,
    "NVS_HELLO_SWAP": P.HELLO_SWAP,
    "NVS_EVICT_ROOM": P.EVICT_ROOM,
    "NVS_RESIDENCY_ANSWER": P.RESIDENCY_ANSWER,
    "NVS_RESIDENCY_REFUSED": P.RESIDENCY_REFUSED,
    "NVS_JOB_EXPLICIT": P.JOB_EXPLICIT,
    "NVS_JOB_TORCH": P.JOB_TORCH,
    "NVS_JOB_UNKNOWN": P.JOB_UNKNOWN,
    "NVS_COMPUTE_LIMIT_SCALE": P.COMPUTE_LIMIT_SCALE,
    "NVS_COMPUTE_SHARE_SCALE": P.COMPUTE_SHARE_SCALE,
}


def _program() -> str:
    lines = ['#include <stdio.h>', '#include <stddef.h>', f'#include "{HEADER_H}"',
             "int main(void) {", 'printf("{\\"structs\\": {");']
    for i, (struct, (fields, _)) in enumerate(STRUCTS.items()):
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
    lines.append('printf("\\"MAGIC\\": %lu, \\"VERSION\\": %d, \\"MAX_PAYLOAD\\": %d", '
                 '(unsigned long)NVS_MAGIC, (int)NVS_VERSION, (int)NVS_MAX_PAYLOAD);')
    for name in REQUIRED_MACROS:
        lines.append(f'printf(", \\"{name}\\": %lu", (unsigned long){name});')
    for name in OPTIONAL_MACROS:
        lines.append(f'#ifdef {name}\nprintf(", \\"{name}\\": %lu", (unsigned long){name});\n#endif')
    lines += ['printf("}}\\n");', "return 0; }"]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_side(tmp_path_factory):
    if not HEADER_H.is_file():
        pytest.skip(f"{HEADER_H} is not there yet (written by the interposer)")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("agreement")
    (d / "dump.c").write_text(_program())
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-o", str(d / "dump"), str(d / "dump.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"protocol.h does not match the Python names:\n{r.stderr}"
    out = subprocess.run([str(d / "dump")], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("struct", sorted(STRUCTS))
def test_struct_sizes_and_offsets_agree(c_side, struct):
    fields, size = STRUCTS[struct]
    c = c_side["structs"][struct]
    assert c["sizeof"] == size
    assert {k: tuple(v) for k, v in c["fields"].items()} == P.field_layout(fields)


def test_message_types_agree(c_side):
    assert c_side["enum"] == {t.name: t.value for t in P.MessageType}


def test_constants_agree(c_side):
    m = c_side["macros"]
    assert (m["MAGIC"], m["VERSION"], m["MAX_PAYLOAD"]) == (P.MAGIC, P.VERSION, P.MAX_PAYLOAD)
    for name, value in REQUIRED_MACROS.items():
        assert m[name] == int(value), name
    for name, value in OPTIONAL_MACROS.items():
        if name in m:
            assert m[name] == int(value), name


def test_documented_sizes():
    """docs/protocol.md gives exact sizes; both sides are also checked against them."""
    assert {s: size for s, (_, size) in STRUCTS.items()} == {
        "nvs_header": 12, "nvs_hello": 520, "nvs_welcome": 16, "nvs_attach": 168,
        "nvs_attached": 16, "nvs_device": 8, "nvs_grant": 16, "nvs_drop": 16, "nvs_released": 24,
        "nvs_mem_update": 24, "nvs_busy": 16, "nvs_settings": 16, "nvs_limits": 16, "nvs_job": 276,
        "nvs_evict": 16, "nvs_residency": 32}
    assert P.MAGIC.to_bytes(4, "little") == b"NVSH"
