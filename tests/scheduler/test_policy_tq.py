"""The dynamic quantum: measured from handoffs and prefetch reports (which no client moves alone:
test_policy_prefetch.py), between a floor and a ceiling;
an explicit quantum overrides it and "back to dynamic" restores it.
"""

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    DEFAULT_DYNAMIC_TQ, EWMA_ALPHA, QUANTA_PER_SWITCH, TQ_CEILING, TQ_FLOOR, Arbiter, Drop, Evict,
    Grant, Mode, Overdue, SwitchReport,
)

from test_policy_replay import GiB, Replay, with_footprints

Q = DropReason.QUANTUM


def dynamic(mode=Mode.SERIAL, **kw):
    return Replay(Arbiter(mode, None, **kw))


def one_switch(r, t0, handoff, report=None):
    """A holds, B waits, A's quantum ends, A answers `handoff` seconds after the drop."""
    r(t0, "request", "A")
    r(t0, "request", "B")
    drop_at = r.arb.next_deadline()
    assert r(drop_at, "tick") == [Drop("A", Q)]
    r(drop_at + handoff, "release", "A", *([report] if report else []))
    r(drop_at + handoff, "release", "B")
    return drop_at + handoff


def test_the_dynamic_quantum_starts_at_the_default_until_a_switch_is_measured():
    r = dynamic()
    assert (r.arb.tq, r.arb.tq_explicit, r.arb.switch_cost) == (DEFAULT_DYNAMIC_TQ, None, None)
    assert r(0, "request", "A") == [Grant("A", DEFAULT_DYNAMIC_TQ)]
    assert DEFAULT_DYNAMIC_TQ == 5.0
    d = r.arb.describe(0)
    assert (d["tq"], d["tq_source"], d["switch_cost"]) == (5.0, "dynamic", None)


def test_a_measured_handoff_sets_the_quantum_to_19_times_the_switch_cost():
    r = dynamic()
    now = one_switch(r, 0, handoff=0.2)
    assert r.arb.switch_cost == pytest.approx(0.2)
    assert r.arb.tq == pytest.approx(QUANTA_PER_SWITCH * 0.2) == pytest.approx(3.8)
    assert r(now + 1, "request", "C") == [Grant("C", r.arb.tq)]  # the next grant carries it
    assert r.arb.describe(now + 1)["switch_cost"] == pytest.approx(0.2)


@pytest.mark.parametrize("handoff, tq", [(0.01, TQ_FLOOR), (0.1, TQ_FLOOR), (7.0, TQ_CEILING),
                                         (1.0, 19.0)])
def test_the_dynamic_quantum_stays_between_the_floor_and_the_ceiling(handoff, tq):
    r = dynamic()
    one_switch(r, 0, handoff)
    assert (TQ_FLOOR, TQ_CEILING) == (2.0, 120.0)
    assert r.arb.tq == pytest.approx(tq)


def test_handoffs_are_averaged_with_a_weight_of_0_3_for_the_newest():
    r = dynamic()
    now = one_switch(r, 0, handoff=0.2)
    one_switch(r, now + 1, handoff=0.4)
    assert EWMA_ALPHA == 0.3
    assert r.arb.switch_cost == pytest.approx(0.3 * 0.4 + 0.7 * 0.2)


def test_prefetch_reports_add_the_bulk_move_back_to_the_switch_cost():
    """Two clients granted with PREFETCH report it; the cost adds the lower median of their averages
    (test_policy_prefetch.py has the rules in full)."""
    r = dynamic(capacity=10 * GiB, reserve=0, client_overhead=0)
    with_footprints(r, 0, A=6, B=6)
    r(0, "request", "A")
    r(0, "request", "B")
    assert r(5, "tick") == [Drop("A", Q, evict=True)]
    assert r(5.2, "release", "A") == [Grant("B", pytest.approx(3.8))]  # 19 x the 0.2 s handoff
    r(5.2, "request", "A")
    drop_at = r.arb.next_deadline()
    assert r(drop_at, "tick") == [Drop("B", Q, evict=True)]
    assert r(drop_at + 0.2, "release", "B") == [Grant("A", pytest.approx(3.8), prefetch=True)]
    assert r.arb.switch_cost == pytest.approx(0.2)
    r(drop_at + 0.2, "request", "B")
    drop_at = r.arb.next_deadline()
    assert r(drop_at, "tick") == [Drop("A", Q, evict=True)]
    r(drop_at + 0.2, "release", "A", report=SwitchReport(prefetch=0.3))  # ...and reports it: alone,
    assert r.arb.switch_cost == pytest.approx(0.2)                      # not yet a measurement
    r(drop_at + 0.2, "request", "A")
    drop_at = r.arb.next_deadline()
    assert r(drop_at, "tick") == [Drop("B", Q, evict=True)]
    r(drop_at + 0.2, "release", "B", report=SwitchReport(prefetch=0.5))  # B had PREFETCH too
    assert r.arb.switch_cost == pytest.approx(0.2 + 0.3)                 # the lower of 0.3, 0.5
    assert r.arb.tq == pytest.approx(9.5)


def test_a_prefetch_report_alone_is_not_a_measurement():
    r = dynamic()
    r(0, "request", "A")
    r(1, "release", "A", report=SwitchReport(prefetch=0.5))
    assert r.arb.switch_cost is None and r.arb.tq == DEFAULT_DYNAMIC_TQ


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_nonsensical_prefetch_report_is_ignored(bad):
    r = dynamic()
    r(0, "request", "A")
    r(1, "release", "A", report=SwitchReport(prefetch=bad))
    assert r.arb.switch_cost is None and r.arb.tq == DEFAULT_DYNAMIC_TQ


def test_idle_releases_admin_drops_and_disconnects_are_not_switches():
    r = Replay(Arbiter(Mode.OFF, None))
    r(0, "request", "A")
    r(0, "request", "B")
    r(0, "request", "C")
    r(1, "set_mode", Mode.SERIAL)                  # B, C dropped ADMIN
    r(3, "release", "B")                           # 2 s later: a mode change, not a switch
    r(4, "disconnect", "C")
    r(5, "release", "A", report=SwitchReport(drain=0.5))  # idle release
    assert r.arb.switch_cost is None and r.arb.tq == DEFAULT_DYNAMIC_TQ


def test_preemption_and_memory_drops_are_switches():
    r = dynamic(Mode.AUTO, capacity=10 * GiB, reserve=0, client_overhead=0)
    with_footprints(r, 0, A=6, B=6)
    r(0, "set_priority", "B", 1)
    r(0, "request", "A")
    r(0, "request", "B")                           # preempts A
    r(0.1, "release", "A")
    assert r.arb.switch_cost == pytest.approx(0.1)
    r(1, "set_footprint", "B", 1 * GiB)
    r(1, "request", "A")                           # beside B
    r(2, "set_footprint", "A", 9 * GiB + 1)        # too big together: A, the newer, is dropped
    r(2.4, "release", "A")
    assert r.arb.switch_cost == pytest.approx(0.3 * 0.4 + 0.7 * 0.1)


def test_an_explicit_quantum_overrides_and_auto_restores_the_dynamic_one():
    r = dynamic()
    now = one_switch(r, 0, handoff=0.2)            # dynamic: 3.8 s
    r(now + 1, "request", "A")
    assert r(now + 2, "set_tq", 7.0) == []
    assert (r.arb.tq, r.arb.tq_explicit) == (7.0, 7.0)
    assert r.arb.describe(now + 2)["tq_source"] == "explicit"
    assert r.arb.next_deadline() == now + 2 + 7.0  # an explicit quantum retunes the holder
    one_switch_measured = r.arb.switch_cost
    assert r(now + 3, "set_tq", None) == []
    assert r.arb.tq_explicit is None and r.arb.tq == pytest.approx(3.8)
    assert r.arb.switch_cost == one_switch_measured  # measurements go on under an explicit one
    assert r.arb.next_deadline() == pytest.approx(now + 3 + 3.8)  # and so does back to dynamic
    assert r.arb.describe(now + 3)["tq_source"] == "dynamic"


def test_switches_measured_under_an_explicit_quantum_count_once_back_to_dynamic():
    r = Replay(Arbiter(Mode.SERIAL, 30.0))
    one_switch(r, 0, handoff=0.5)
    assert r.arb.tq == 30.0 and r.arb.switch_cost == pytest.approx(0.5)
    r(100, "set_tq", None)
    assert r.arb.tq == pytest.approx(9.5)


def test_a_change_of_the_dynamic_quantum_does_not_retune_running_holders():
    r = dynamic(Mode.AUTO, capacity=10 * GiB, reserve=0, client_overhead=0)
    with_footprints(r, 0, A=4, B=4, C=4)
    r(0, "request", "A")                           # quantum 5: deadline 5
    r(1, "request", "B")                           # deadline 6
    r(2, "request", "C")                           # blocked
    assert r(5, "tick") == [Drop("A", Q, evict=True)]
    assert r(5.1, "release", "A") == [Grant("C", pytest.approx(2.0))]  # 19 x 0.1 -> the floor
    assert r.arb.holders["B"].deadline == 6        # B keeps the quantum it was granted
    assert r.arb.holders["C"].deadline == pytest.approx(7.1)


def test_eviction_of_a_silent_holder_uses_the_effective_quantum():
    r = dynamic()
    r(0, "request", "A")
    r(1, "request", "B")
    tq = DEFAULT_DYNAMIC_TQ
    assert r(tq, "tick") == [Drop("A", Q)]
    assert r(2 * tq, "tick") == [Overdue("A", tq)]
    assert r(3 * tq, "tick") == [Evict("A", 2 * tq), Grant("B", tq)]


def test_aging_counts_in_effective_quanta():
    r = dynamic()
    r(0, "request", "A")
    r(0, "request", "B")
    assert r.arb.effective_priority("B", 2 * DEFAULT_DYNAMIC_TQ - 0.01) == 0
    assert r.arb.effective_priority("B", 2 * DEFAULT_DYNAMIC_TQ) == 1
    r(0, "set_tq", 1.0)
    assert r.arb.effective_priority("B", 2.0) == 1


def test_release_takes_an_optional_report():
    for kw, cost in (({}, None), ({"report": None}, None),
                     ({"report": SwitchReport(prefetch=0.2)}, None)):  # no PREFETCH: no sample
        arb = Arbiter(Mode.SERIAL, None)
        arb.request("A", 0.0)
        arb.release("A", 5.0, **kw)
        assert arb.state_of("A") == "idle"
        assert arb.switch_cost == cost
