#!/usr/bin/env python3
"""Which glibc versions an ELF file needs, and whether all are at most a floor (default 2.17).

    tools/check_glibc_floor.py [--max 2.17] FILE...

Prints, per file, each GLIBC_x version it requires with the imported symbols bound to it, newest
first, and exits 1 if any is newer than --max (2 on a file that is not a 64-bit little-endian ELF).
This is what the dynamic loader checks at start: a program or preloaded library that requires a
version its glibc does not define is refused ("version `GLIBC_2.34' not found"). Read from the
ELF sections themselves (.gnu.version_r, .dynsym, .gnu.version), so that no binutils are needed.
libnvshare.so keeps below 2.17 by native/src/core/glibc_compat.h.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections import defaultdict
from pathlib import Path

SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
SHN_UNDEF = 0


class NotElf(ValueError):
    pass


def _sections(data: bytes) -> list[dict]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        (_name, kind, _flags, _addr, offset, size, link, info, _align,
         entsize) = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        out.append(dict(type=kind, offset=offset, size=size, link=link, info=info, entsize=entsize))
    return out


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def required_versions(path: Path) -> dict[str, dict[str, list[str]]]:
    """{needed file (libc.so.6): {version: [undefined symbols bound to it]}} for one ELF file."""
    data = Path(path).read_bytes()
    sections = _sections(data)
    by_type = {s["type"]: s for s in sections}
    needed: dict[str, dict[str, list[str]]] = {}
    index_to: dict[int, tuple[str, str]] = {}
    verneed = by_type.get(SHT_GNU_VERNEED)
    if verneed is None:
        return needed
    strtab = sections[verneed["link"]]["offset"]
    at = verneed["offset"]
    for _ in range(verneed["info"]):
        _ver, count, file_at, aux, nxt = struct.unpack_from("<HHIII", data, at)
        file = _cstr(data, strtab + file_at)
        versions = needed.setdefault(file, {})
        a = at + aux
        for _ in range(count):
            _hash, _flags, index, name_at, anext = struct.unpack_from("<IHHII", data, a)
            version = _cstr(data, strtab + name_at)
            versions.setdefault(version, [])
            index_to[index] = (file, version)
            a += anext
        at += nxt
    dynsym, versym = by_type.get(SHT_DYNSYM), by_type.get(SHT_GNU_VERSYM)
    if dynsym and versym:
        names = sections[dynsym["link"]]["offset"]
        for i in range(dynsym["size"] // dynsym["entsize"]):
            name_at, _info, _other, shndx = struct.unpack_from("<IBBH", data, dynsym["offset"] + i * 24)
            index, = struct.unpack_from("<H", data, versym["offset"] + 2 * i)
            if shndx == SHN_UNDEF and (index & 0x7FFF) in index_to:
                file, version = index_to[index & 0x7FFF]
                needed[file][version].append(_cstr(data, names + name_at))
    return needed


def glibc_version(name: str) -> tuple[int, ...] | None:
    """(2, 17) for "GLIBC_2.17"; None for anything else (GLIBC_PRIVATE, GCC_3.0, ...)."""
    if not name.startswith("GLIBC_"):
        return None
    try:
        return tuple(int(p) for p in name[len("GLIBC_"):].split("."))
    except ValueError:
        return None


def too_new(path: Path, floor: tuple[int, ...]) -> dict[str, list[str]]:
    """{version: symbols} for every GLIBC version newer than `floor` that `path` requires."""
    out: dict[str, list[str]] = defaultdict(list)
    for versions in required_versions(path).values():
        for name, symbols in versions.items():
            v = glibc_version(name)
            if v is not None and v > floor:
                out[name] += symbols
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max", default="2.17", help="the newest glibc version allowed (default 2.17)")
    p.add_argument("files", nargs="+", type=Path)
    a = p.parse_args(argv)
    floor = glibc_version("GLIBC_" + a.max)
    if floor is None:
        p.error(f"--max {a.max!r}: expected a version such as 2.17")
    status = 0
    for f in a.files:
        try:
            needed = required_versions(f)
        except (OSError, NotElf) as e:
            print(f"{f}: {e}", file=sys.stderr)
            return 2
        rows = sorted(((glibc_version(v), v, lib, syms) for lib, vs in needed.items()
                       for v, syms in vs.items() if glibc_version(v)), reverse=True)
        print(f"{f}: needs {rows[0][1] if rows else 'no GLIBC version'}")
        for v, name, lib, syms in rows:
            mark = "  TOO NEW" if v > floor else ""
            print(f"  {name:<12} {lib:<16} {' '.join(sorted(syms)) or '-'}{mark}")
            if v > floor:
                status = 1
    if status:
        print(f"needs glibc newer than {a.max}: pin those symbols in native/src/core/glibc_compat.h",
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
