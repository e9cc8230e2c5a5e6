"""The edges of the quotas' ranges, as text, and whether each is accepted: one table that every way
of setting a quota is checked against (nvsharectl's flags and the control ops:
tests/cli/test_ctl_quota_ranges.py; pod annotations: tests/kubernetes/test_k8s_pod_settings.py; the
library's environment: tests/interposer/test_quota_env_ranges.py), so that all of them accept the
same values: a compute limit from 0.1 to 100 percent or "none", a compute share from 0.001 to
1000000, a memory limit from 1 byte to 2^64-1 bytes or "none".

Each value is written so that every grammar reads it (plain decimals; a trailing % only on the
compute limit, which every reader of it allows). Values just past a bound by less than the wire's
step (0.099 percent, 100.001 percent, 0.0009) round into the range on the wire and must still be
refused: a bound applies to the number as written.
"""

U64 = 2**64 - 1

COMPUTE_LIMIT_EDGES = [
    ("none", True), ("-5", False), ("0", False), ("0.05", False), ("0.09", False),
    ("0.099", False), ("0.1", True), ("0.12", True), ("1", True), ("12.5", True), ("99.99", True),
    ("100", True), ("100%", True), ("100.001", False), ("100.01", False), ("101", False),
]
COMPUTE_SHARE_EDGES = [
    ("none", False), ("-1", False), ("0", False), ("0.0005", False), ("0.0009", False),
    ("0.001", True), ("0.0012", True), ("1", True), ("2.5", True), ("999999.999", True),
    ("1000000", True), ("1000000.0001", False), ("1000000.001", False), ("1000001", False),
]
MEMORY_LIMIT_EDGES = [
    ("none", True), ("0", False), ("1", True), ("1B", True), ("4GiB", True), (str(U64), True),
    ("16777216TiB", False),  # 2^64 bytes: one more than LIMITS carries
]
