"""The C side of the contract, generated: `python -m xpushare.wire.cheader OUT.h` writes the header
that native/src/session/protocol.h includes (native/CMakeLists.txt runs it at every build where wire/
changed). It carries the message types, flags, scales and limits under their C names, and
NVS_CONTRACT_LAYOUT_CHECKS: a static assertion of every payload's size and every field's offset, so
a hand-written struct in protocol.h that drifts from messages.py fails the library's own build.

Nothing here is kept in step by hand: the C names are derived (NVS_ + the Python name; an enum's
members prefixed by what they are), and the one list below says which Python names C needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import messages as m
from .quota_ranges import COMPUTE_LIMIT_MAX, COMPUTE_SHARE_MAX
from .scheduling import CONTEXT_RESERVE
from .sizes import SIZE_EXPECTED

# Python names the library uses, written as NVS_<name>.
CONSTANTS = (
    "MAGIC", "VERSION", "MAX_PAYLOAD", "PRIORITY_LIMIT",
    "HELLO_REQUIRE_SCHEDULER", "HELLO_SWAP", "HELLO_SUSPEND", "HELLO_LATENCY_SENSITIVE", "HELLO_QUEUE_BOUND",
    "HELLO_HOLD", "HELLO_PIN_AHEAD", "HELLO_WAITERS", "HELLO_MOVE", "SUSPEND_MOVE", "RESUMED_MOVED",
    "GRANT_PREFETCH", "DROP_EVICT", "DROP_GANG",
    "FEATURE_BUSY", "FEATURE_QUOTAS", "FEATURE_JOBS", "FEATURE_SWAP", "FEATURE_BUSY_SPANS",
    "FEATURE_SUSPEND",
    "BUSY_SPANS_MAX",
    "EVICT_ROOM", "RESIDENCY_ANSWER", "RESIDENCY_REFUSED",
    "JOB_EXPLICIT", "JOB_TORCH", "JOB_UNKNOWN", "COMPUTE_LIMIT_SCALE", "COMPUTE_SHARE_SCALE",
)
LIMITS = {  # NVS_<name>: what the library's environment accepts, as the scheduler does
    "COMPUTE_LIMIT_MAX": COMPUTE_LIMIT_MAX, "COMPUTE_SHARE_MAX": COMPUTE_SHARE_MAX,
    "CONTEXT_RESERVE": CONTEXT_RESERVE,
}
STRINGS = {"SIZE_EXPECTED": SIZE_EXPECTED}  # NVS_<name>: what both halves say, word for word
ENUM_PREFIXES = ((m.DropReason, "DROP"), (m.ReleaseReason, "RELEASE"), (m.SuspendStatus, "SUSPEND_STATUS"))
STRUCTS = {  # C struct: its Python fields
    "nvs_header": m.HEADER_FIELDS, "nvs_hello": m.Hello.FIELDS, "nvs_welcome": m.Welcome.FIELDS,
    "nvs_attach": m.Attach.FIELDS, "nvs_attached": m.Attached.FIELDS,
    "nvs_device": m.LockRequest.FIELDS, "nvs_grant": m.Grant.FIELDS, "nvs_drop": m.DropLock.FIELDS,
    "nvs_released": m.Released.FIELDS, "nvs_mem_update": m.MemUpdate.FIELDS,
    "nvs_busy": m.BusyUpdate.FIELDS, "nvs_settings": m.Settings.FIELDS,
    "nvs_limits": m.Limits.FIELDS, "nvs_job": m.Job.FIELDS, "nvs_evict": m.Evict.FIELDS,
    "nvs_residency": m.Residency.FIELDS, "nvs_span": m.SPAN_FIELDS,
    "nvs_busy_spans": m.BusySpans.FIELDS, "nvs_suspend": m.Suspend.FIELDS,
    "nvs_suspend_ready": m.SuspendReady.FIELDS, "nvs_resumed": m.Resumed.FIELDS,
    "nvs_resume_req": m.ResumeRequest.FIELDS, "nvs_queue_bound": m.QueueBound.FIELDS,
    "nvs_hold": m.Hold.FIELDS, "nvs_bursts": m.Bursts.FIELDS, "nvs_burst": m.Burst.FIELDS,
    "nvs_prepare_swap": m.PrepareSwap.FIELDS,
    "nvs_waiters": m.Waiters.FIELDS,
}


SIGNED = {"NVS_VERSION", "NVS_MAX_PAYLOAD", "NVS_PRIORITY_LIMIT"}  # the rest are unsigned


def _literal(name: str, value: int) -> str:
    if name in SIGNED:
        return str(value)
    suffix = "ull" if value > 0xFFFFFFFF else "u"
    return f"{value:#x}{suffix}" if name == "NVS_MAGIC" else f"{value}{suffix}"


def _c_string(text: str) -> str:
    if not text.isascii() or not text.isprintable():
        raise ValueError(f"not a plain C string: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def constants() -> dict[str, int]:
    """{C name: value} of every constant the header defines (the enums' members too)."""
    out = {f"NVS_{name}": int(getattr(m, name)) for name in CONSTANTS}
    out.update({f"NVS_{name}": int(value) for name, value in LIMITS.items()})
    for enum, prefix in ENUM_PREFIXES:
        out.update({f"NVS_{prefix}_{member.name}": int(member) for member in enum})
    return out


def layout_checks() -> list[str]:
    checks = []
    for struct, fields in STRUCTS.items():
        layout = m.field_layout(fields)
        size = sum(n for _, n in layout.values())
        checks.append(f'_Static_assert(sizeof(struct {struct}) == {size}, "{struct} is {size} bytes")')
        checks += [f'_Static_assert(offsetof(struct {struct}, {name}) == {offset}, '
                   f'"{struct}.{name} is at byte {offset}")' for name, (offset, _) in layout.items()]
    return checks


def header() -> str:
    lines = ["/* Generated from xpushare.wire by xpushare/wire/cheader.py: do not edit. */",
             "#ifndef NVS_CONTRACT_H", "#define NVS_CONTRACT_H", "", "#include <stddef.h>", "",
             "enum nvs_msg_type {"]
    lines += [f"    NVS_{t.name} = {int(t)}," for t in m.MessageType]
    lines += ["};", f"#define NVS_MSG_TYPE_MAX {max(m.MessageType)}  /* the highest type known */", ""]
    lines += [f"#define {name} {_literal(name, value)}" for name, value in constants().items()]
    lines += [f"#define NVS_{name} {_c_string(text)}" for name, text in STRINGS.items()]
    lines += ["", "/* in protocol.h, after its structs: each payload as messages.py lays it out */",
              "#define NVS_CONTRACT_LAYOUT_CHECKS \\"]
    lines += [f"    {check}; \\" for check in layout_checks()]
    lines += ["    struct nvs_contract_checked", "", "#endif", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m xpushare.wire.cheader OUT.h", file=sys.stderr)
        return 2
    out = Path(argv[0])
    text = header()
    if not out.exists() or out.read_text() != text:  # unchanged: no rebuild of what includes it
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
