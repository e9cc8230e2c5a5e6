"""CPU tests of bench/core/schedlog.py: durations, switches and releases from the scheduler's log."""

from __future__ import annotations


import pytest

from bench.core import schedlog
from bench.core.common import harness


def ev(t: float, kind: str, pid: int, **fields: str) -> harness.Event:
    return harness.Event(t, kind, pid, dict(fields))


# ----------------------------------------------------------------------------- the scheduler's log

@pytest.mark.parametrize("text, seconds", [("12.3ms", 0.0123), ("1.23s", 1.23), ("170us", 170e-6),
                                           ("0.0ms", 0.0), ("5s", 5.0)])
def test_durations_of_the_log(text, seconds):
    assert schedlog.duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", None, "none", "12", "ms", "1.2min"])
def test_what_is_not_a_duration(text):
    assert schedlog.duration_s(text) is None


def test_switches_pair_each_drop_with_the_release_that_answered_it():
    events = [
        ev(0.5, "grant", 1, quantum="5s", prefetch="no"),
        ev(1.0, "drop", 1, reason="quantum", evict="yes"),
        ev(1.0, "drop", 9, reason="quantum", evict="yes"),  # another pid
        ev(1.25, "release", 1, reason="dropped", held="5.00s", drain="10.0ms", evict="200.0ms", prefetch="0.0ms"),
        ev(1.3, "grant", 2, quantum="5s", prefetch="yes"),
        ev(6.3, "drop", 2, reason="quantum", evict="yes"),
        ev(6.5, "release", 2, reason="dropped", held="5.00s", drain="5.0ms", evict="150.0ms", prefetch="120.0ms"),
        ev(7.0, "drop", 1, reason="quantum", evict="yes"),  # after the window
    ]
    found = schedlog.switches(events, [1, 2], 0.0, 6.9)
    assert [(s["pid"], s["reason"], s["evict"]) for s in found] == [(1, "quantum", True), (2, "quantum", True)]
    assert found[0]["handoff_ms"] == pytest.approx(250.0)
    assert found[0]["evict_ms"] == pytest.approx(200.0) and found[0]["drain_ms"] == pytest.approx(10.0)
    assert found[1]["prefetch_ms"] == pytest.approx(120.0)
    totals = schedlog.switch_totals(found, schedlog.releases(events, [1, 2], 0.0, 6.9))
    assert totals["count"] == 2 and totals["evicting"] == 2 and totals["reasons"] == ["quantum"]
    assert totals["evict_ms"] == pytest.approx(175.0)
    assert totals["prefetches"] == 1 and totals["prefetch_ms"] == pytest.approx(120.0)
    assert [g["prefetch"] for g in schedlog.grants(events, [1, 2], 0.0, 6.9)] == [False, True]


def test_a_drop_not_yet_answered_has_no_handoff():
    found = schedlog.switches([ev(1.0, "drop", 1, reason="preempted", evict="no")], [1], 0.0, 2.0)
    assert found[0]["handoff_ms"] is None and found[0]["evict"] is False
    assert schedlog.switch_totals(found, [])["handoff_ms"] is None


def test_switches_counted_from_real_scheduler_log_lines():
    """The harness's parser and ours agree on the scheduler's own log format."""
    lines = ["2026-01-01 00:00:00,000 nvshare-scheduler INFO drop pid=41 gpu=GPU-1 reason=quantum evict=yes",
             "2026-01-01 00:00:00,100 nvshare-scheduler INFO release pid=41 gpu=GPU-1 reason=dropped "
             "held=5.00s drain=12.3ms evict=170.0ms prefetch=0.0ms"]
    events = []
    for t, line in enumerate(lines):
        m = harness.EVENT_RE.search(line)
        events.append(harness.Event(float(t), m.group(1), int(m.group(2)),
                                    dict(__import__("re").findall(r"(\w+)=(\S+)", m.group(3)))))
    found = schedlog.switches(events, [41], 0.0, 5.0)
    assert len(found) == 1 and found[0]["evict_ms"] == pytest.approx(170.0)
    assert found[0]["drain_ms"] == pytest.approx(12.3)
