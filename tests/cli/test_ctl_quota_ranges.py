"""nvsharectl's quota flags against the scheduler's schema for their ops, at the edges of each range:
a flag accepts a value exactly when its op does and passes it on unchanged; what it refuses is a usage
error (exit 2) that names the flag and the range. Both accept the edges of tests/quota_edges.py, the
table the pod annotations and the library's environment are checked against too."""

import math
import re
import subprocess
import sys
from decimal import Decimal

import pytest

from sched_harness import child_env
from tests.quota_edges import COMPUTE_LIMIT_EDGES, COMPUTE_SHARE_EDGES, MEMORY_LIMIT_EDGES
from xpushare.cli import ctl
from xpushare.scheduler.control.ops import OPS
from xpushare.wire.ctlschema import Invalid, validate
from xpushare.wire.quota_ranges import COMPUTE_LIMIT, COMPUTE_SHARE, MEMORY_LIMIT
from xpushare.wire.sizes import parse_size

LIMIT, SHARE, MEMORY = "--set-compute-limit", "--set-compute-share", "--set-memory-limit"
OP = {LIMIT: "set_compute_limit", SHARE: "set_compute_share", MEMORY: "set_memory_limit"}
U64 = 2**64 - 1


def _edges_of_number(flag, kind):
    """The two bounds of a Number kind and the closest floats beyond them, as repr() writes them:
    these follow the range wherever it moves."""
    return [(flag, repr(v), v) for v in (math.nextafter(kind.lo, -math.inf), float(kind.lo),
                                         float(kind.hi), math.nextafter(kind.hi, math.inf))]


# (flag, the text on the command line, the value it stands for in the op's request). The literal rows
# pin today's ranges; the generated ones follow the kinds.
EDGES = [
    (LIMIT, "none", "none"), (LIMIT, "0", 0.0), (LIMIT, "0.001", 0.001), (LIMIT, "0.1", 0.1),
    (LIMIT, "1e-1", 0.1), (LIMIT, "1", 1.0), (LIMIT, "100", 100.0), (LIMIT, "100%", 100.0),
    (LIMIT, "100.001", 100.001),
    (LIMIT, "-5", -5.0), (LIMIT, "inf", math.inf), (LIMIT, "nan", math.nan), (LIMIT, "half", "half"),
    *_edges_of_number(LIMIT, COMPUTE_LIMIT),
    (SHARE, "none", "none"), (SHARE, "0", 0.0), (SHARE, "0.0009", 0.0009), (SHARE, "0.001", 0.001),
    (SHARE, "1e-3", 0.001), (SHARE, "1", 1.0),
    (SHARE, "1e6", 1e6), (SHARE, "1000000", 1e6), (SHARE, "1000000.5", 1000000.5),
    (SHARE, "-1", -1.0), (SHARE, "inf", math.inf), (SHARE, "nan", math.nan),
    *_edges_of_number(SHARE, COMPUTE_SHARE),
    (MEMORY, "none", "none"), (MEMORY, "0", 0), (MEMORY, "0.5", 0), (MEMORY, "1", 1),
    (MEMORY, "1B", 1), (MEMORY, "4GiB", 4 << 30), (MEMORY, str(U64), U64),
    (MEMORY, "16777216TiB", U64 + 1), (MEMORY, "lots", "lots"),
    *[(MEMORY, str(v), v) for v in (MEMORY_LIMIT.lo - 1, MEMORY_LIMIT.lo, MEMORY_LIMIT.hi,
                                    MEMORY_LIMIT.hi + 1)],
]

# What a refusal must say: the bounds of the flag's range, and the word that clears a limit.
RANGE_TEXT = {LIMIT: ("from 0.1 to 100", "or none"),
              SHARE: ("from 0.001 to 1000000",),
              MEMORY: (f"1 to {U64} bytes", "or none")}

REFUSED = object()


def _op_accepts(flag: str, value) -> bool:
    op = OP[flag]
    try:
        validate(op, OPS[op].schema, {"op": op, "value": value, "pid": 1})
    except Invalid:
        return False
    return True


def _flag_reads(flag: str, text: str, capsys):
    """What nvsharectl would send for `flag text`, or REFUSED with its exit code and stderr."""
    try:
        args = ctl.build_parser().parse_args([flag, text, "--pid", "1"])
    except SystemExit as e:
        return REFUSED, e.code, capsys.readouterr().err
    return getattr(args, flag[2:].replace("-", "_")), 0, ""


@pytest.mark.parametrize("flag, text, value", EDGES, ids=lambda x: str(x))
def test_a_quota_flag_accepts_exactly_what_its_op_accepts(flag, text, value, capsys):
    sent, code, err = _flag_reads(flag, text, capsys)
    assert (sent is not REFUSED) == _op_accepts(flag, value), (flag, text, err)
    if sent is REFUSED:
        assert code == 2 and "usage: nvsharectl" in err
        assert f"argument {flag}: invalid " in err and repr(text) in err
        for words in RANGE_TEXT[flag]:
            assert words in err, (words, err)
    else:
        assert sent == value and type(sent) is type(value)


def _request_value(flag: str, text: str):
    """What the op's request carries for `text` when a client other than nvsharectl sends it."""
    if text == "none":
        return text
    if flag != MEMORY:
        return float(text.rstrip("%"))
    try:
        return parse_size(text)
    except ValueError:  # past 64 bits nvsharectl refuses it; another client may still send it
        number, unit = re.fullmatch(r"([0-9.]+)\s*([A-Za-z]*)", text.strip()).groups()
        return int(Decimal(number) * 1024 ** "BKMGT".index((unit or "B")[0].upper()))


SHARED_EDGES = [(LIMIT, text, ok) for text, ok in COMPUTE_LIMIT_EDGES] + \
               [(SHARE, text, ok) for text, ok in COMPUTE_SHARE_EDGES] + \
               [(MEMORY, text, ok) for text, ok in MEMORY_LIMIT_EDGES]


@pytest.mark.parametrize("flag, text, accepted", SHARED_EDGES, ids=lambda x: str(x))
def test_flags_and_ops_accept_the_edges_every_interface_accepts(flag, text, accepted, capsys):
    sent, _, err = _flag_reads(flag, text, capsys)
    assert (sent is not REFUSED) == accepted, (flag, text, err)
    assert _op_accepts(flag, _request_value(flag, text)) == accepted, (flag, text)


def test_every_quota_flag_has_its_edges_checked():
    assert {op for _, op in ctl.QUOTA_FLAGS} == set(OP.values())
    assert {flag for flag, _, _ in EDGES} == set(OP)


def test_nvsharectl_checks_quotas_without_importing_the_running_scheduler():
    code = ("import sys, xpushare.cli.ctl; "
            "print(' '.join(m for m in sys.modules if m.startswith(('xpushare.scheduler', "
            "'xpushare.wire.quota_ranges'))))")
    loaded = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                            text=True, check=True, timeout=60).stdout.split()
    assert loaded == ["xpushare.wire.quota_ranges"]  # the ranges from the contract, no scheduler
