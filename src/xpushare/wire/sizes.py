"""Memory sizes as users write them: `8GiB`, `512MiB`, `16G`, `1.5GiB`, `1073741824`.

Grammar: optional spaces, a non-negative number (digits, optionally `.digits`), optional spaces, an
optional unit, case-insensitive: B, K/Ki/KB/KiB, M/Mi/MB/MiB, G/Gi/GB/GiB, T/Ti/TB/TiB
(the same grammar as native/src/core/config.c). Every unit is binary
(K = KB = KiB = 1024 bytes), as nvidia-smi and CUDA count memory. Fractions round down to whole bytes.
A size must fit the wire's 64-bit byte counts (at most SIZE_MAX, as the C parser holds it too).
"""

from __future__ import annotations

import argparse
import re
from decimal import Decimal

_UNITS = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
SIZE_MAX = (1 << 64) - 1  # bytes: the protocol carries sizes as unsigned 64-bit integers
# ASCII only, as C's isspace/isdigit/isalpha read it (re's \s would also take \x1c-\x1f and Unicode
# spaces, which the library refuses)
_SIZE_RE = re.compile(r"^[ \t\n\v\f\r]*([0-9]+(?:\.[0-9]+)?)[ \t\n\v\f\r]*([a-zA-Z]*)[ \t\n\v\f\r]*\Z")
# What both halves say of a size they refuse (the library's warning quotes it through nvs_contract.h)
SIZE_EXPECTED = "a number of bytes, or of K, M, G or T (binary units: 16GiB, 512MiB), at most 16 EiB"


def parse_size(text: str) -> int:
    """Parse a size into bytes; raises ValueError with the accepted forms on bad input."""
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else ""
    if unit not in ("", "b"):
        unit = unit[0] if unit[1:] in ("", "b", "i", "ib") else "?"
    value = int(Decimal(m.group(1)) * (1024 ** _UNITS[unit])) if m and unit in _UNITS else -1
    if not 0 <= value <= SIZE_MAX:
        raise ValueError(f"invalid size {text!r}: expected {SIZE_EXPECTED}")
    return value


def format_size(n: int) -> str:
    """Bytes as a short human string with a binary unit: 17179869184 -> '16GiB', 1536 -> '1.5KiB'."""
    n = int(n)
    for exp, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(n) >= 1024 ** exp:
            value = f"{n / 1024 ** exp:.2f}".rstrip("0").rstrip(".")
            return f"{value}{unit}"
    return f"{n}B"


def size_argument(text: str) -> int:
    """`type=` for argparse options that take a size: a bad value becomes a usage error (exit 2)."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
