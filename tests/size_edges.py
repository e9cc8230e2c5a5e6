"""The edges of the size grammar (xpushare.wire.sizes; native/src/core/config.c's nvs_parse_size), as
text, and the bytes each means (None: refused). One table that both parsers are run through: the
scheduler's and nvshare-run's flags and nvsharectl take Python's, the library's environment
(NVSHARE_GPU_MEMORY, NVSHARE_GPU_MEMORY_LIMIT, NVSHARE_CONTEXT_RESERVE) takes C's
(tests/interposer/test_size_edges.py)."""

U64 = 2**64 - 1
KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

SIZE_EDGES = [
    # plain bytes, units, their spellings and case
    ("0", 0), ("1", 1), ("1073741824", GiB), ("512B", 512), ("1k", KiB), ("1K", KiB),
    ("1KB", KiB), ("1KiB", KiB), ("1ki", KiB), ("3m", 3 * MiB), ("3MiB", 3 * MiB), ("2g", 2 * GiB),
    ("2GB", 2 * GiB), ("1t", TiB), ("1TiB", TiB),
    # fractions round down to whole bytes
    ("1.5GiB", 3 * GiB // 2), ("0.5K", 512), ("0.0001K", 0), ("1.9999B", 1), ("1.0", 1),
    ("0.9999999999999999999999T", TiB - 1),
    # spaces (ASCII only, as C's isspace reads them)
    (" 16GiB ", 16 * GiB), ("16 GiB", 16 * GiB), ("\t8G\n", 8 * GiB),
    ("5G\x1f", None), ("5G\xa0", None), ("\u20035G", None),
    # the 64-bit edge: 2^64 - 1 bytes is the most any size may be
    (str(U64), U64), (str(U64 + 1), None), ("16777215.999999999999T", U64 - 1),
    ("16777216T", None), ("16777216TiB", None), ("99999999999999999999999", None),
    # malformed
    ("", None), ("G", None), ("-1", None), ("+1", None), ("1.", None), (".5G", None),
    ("1e3", None), ("0x10", None), ("1 2", None), ("1P", None), ("1PiB", None), ("1KiBB", None),
    ("1Kib", KiB), ("1kibibytes", None), ("１", None),
]
