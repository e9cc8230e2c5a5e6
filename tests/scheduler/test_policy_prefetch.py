"""The prefetch part of the dynamic quantum: what clients report is theirs to make up, so no client
can move the quantum on its own (docs/protocol.md "The quantum").

- A report is cut to a plausible time: at most SWITCH_REPORT_MAX, and at most the client's footprint
  moved at PREFETCH_FLOOR_RATE (model.plausible_prefetch); LOCK_RELEASED's microseconds are cut to
  SWITCH_REPORT_MAX on the way in (SwitchReport.from_us).
- It counts only for a grant that carried PREFETCH, into that client's own average.
- The switch cost adds the lower median of those averages, once SWITCH_REPORTERS (2) clients have
  one; a client's average goes with its disconnect.
"""

import random
import statistics

import pytest

from xpushare.wire.protocol import DropReason
from xpushare.scheduler.policy import (
    DEFAULT_DYNAMIC_TQ, PREFETCH_FLOOR_RATE, SWITCH_REPORTERS, QUANTA_PER_SWITCH,
    SWITCH_REPORT_MAX, TQ_CEILING, Arbiter, Drop, Grant, LowerMedian, Mode, SwitchReport,
    plausible_prefetch,
)

GiB = 2**30
HUGE = (2**32 - 1) / 1e6   # the most a u32 of microseconds says: 4295 s
HANDOFF = 0.001            # every release in rotate() comes this long after its drop


def test_the_bounds_are_as_documented():
    assert (SWITCH_REPORT_MAX, PREFETCH_FLOOR_RATE, SWITCH_REPORTERS) == (60.0, 1e9, 2)


@pytest.mark.parametrize("seconds, footprint, expected", [
    (0.5, 8 * GiB, 0.5),                                  # plausible: as reported
    (HUGE, 8 * GiB, 8 * GiB / 1e9),                       # 8 GiB at 1 GB/s: 8.6 s at most
    (HUGE, 100 * GiB, SWITCH_REPORT_MAX),                 # the ceiling
    (59.0, 100 * GiB, 59.0),
    (0.5, 0, 0.0),                                        # nothing to prefetch: no time
    (0.5, GiB // 4, 0.25 * GiB / 1e9),
    (float("nan"), 8 * GiB, 0.0), (float("inf"), 8 * GiB, 0.0), (-1.0, 8 * GiB, 0.0),
    (0.0, 8 * GiB, 0.0),
])
def test_a_reported_prefetch_is_cut_to_a_plausible_time(seconds, footprint, expected):
    assert plausible_prefetch(seconds, footprint) == pytest.approx(expected)


@pytest.mark.parametrize("us, expected", [
    ((0, 0, 0), (0.0, 0.0, 0.0)),
    ((1500, 20_000, 250_000), (0.0015, 0.02, 0.25)),
    ((2**32 - 1,) * 3, (SWITCH_REPORT_MAX,) * 3),
    ((60_000_001, 59_999_999, 2**31), (SWITCH_REPORT_MAX, 59.999999, SWITCH_REPORT_MAX)),
])
def test_lock_released_times_are_cut_to_the_ceiling(us, expected):
    r = SwitchReport.from_us(*us)
    assert (r.drain, r.evict, r.prefetch) == pytest.approx(expected)


def rotate(reports: dict, rounds: int = 2, footprint: int = 6 * GiB) -> Arbiter:
    """Serial mode, one client per entry of `reports` (client -> the prefetch it reports at every
    release), footprints two of which do not fit: each takes its quantum in turn, every drop
    evicts, and from the second round on every grant carries PREFETCH. Each dropped holder
    releases HANDOFF after the drop, reporting, and asks again."""
    arb = Arbiter(Mode.SERIAL, None, capacity=10 * GiB, reserve=0, client_overhead=0)
    now = 0.0
    for c in reports:
        arb.set_footprint(c, footprint, now)
        arb.request(c, now)
    prefetched = {}
    for _ in range(rounds * len(reports)):
        now = arb.next_deadline()
        (drop,) = arb.tick(now)
        assert isinstance(drop, Drop) and drop.evict
        now += HANDOFF
        actions = arb.release(drop.client, now, report=SwitchReport(prefetch=reports[drop.client]))
        grant = next(a for a in actions if isinstance(a, Grant))
        prefetched[grant.client] = grant.prefetch
        arb.request(drop.client, now)
    assert rounds < 2 or all(prefetched.values()), "every grant of the second round has PREFETCH"
    return arb


@pytest.mark.parametrize("reports, expected", [
    ({"A": 0.4}, None),                                   # one client alone: no prefetch cost
    ({"A": HUGE}, None),
    ({"A": 0.4, "B": HUGE}, 0.4),                         # the lower median: the honest one
    ({"A": HUGE, "B": 0.4}, 0.4),
    ({"A": 0.4, "B": 0.2}, 0.2),
    ({"A": 0.4, "B": 0.2, "C": HUGE}, 0.4),
    ({"A": 0.1, "B": 0.2, "C": 0.3, "D": HUGE}, 0.2),
    ({"A": 0.1, "B": HUGE, "C": 0.3, "D": HUGE, "E": 0.2}, 0.3),
    ({"A": 0.0, "B": 0.0}, None),                         # no sample: nothing measured
    ({"A": HUGE, "B": HUGE}, 6 * GiB / 1e9),              # two that agree: cut by their footprint
])
def test_the_prefetch_cost_is_the_lower_median_of_the_clients_averages(reports, expected):
    arb = _alone_with_prefetch(reports["A"]) if len(reports) == 1 else rotate(reports)
    assert arb.prefetch_cost == (None if expected is None else pytest.approx(expected))
    cost = HANDOFF + (expected or 0.0)
    assert arb.switch_cost == pytest.approx(cost)
    assert arb.tq == pytest.approx(min(TQ_CEILING, max(2.0, QUANTA_PER_SWITCH * cost)))


@pytest.mark.parametrize("late", [0.0, 1.0, 3.9])
def test_a_client_that_releases_late_does_not_move_the_quantum(late):
    """Serial, A and B take turns; B answers every DROP_LOCK `late` seconds after HANDOFF (short
    of being evicted). The handoff is each client's own average, and the lower median of the two
    is A's: the quantum stays what A's handoffs make it."""
    arb = Arbiter(Mode.SERIAL, None, capacity=10 * GiB, reserve=0, client_overhead=0)
    for c in "AB":
        arb.set_footprint(c, GiB, 0.0)
        arb.request(c, 0.0)
    now = 0.0
    for _ in range(20):
        now = arb.next_deadline()
        (drop,) = arb.tick(now)
        now += HANDOFF + (late if drop.client == "B" else 0.0)
        arb.release(drop.client, now)
        arb.request(drop.client, now)
    assert arb.handoff_cost == pytest.approx(HANDOFF)
    assert arb.tq == pytest.approx(max(2.0, QUANTA_PER_SWITCH * HANDOFF))


def _alone_with_prefetch(report: float) -> Arbiter:
    """A, evicted for B, granted again with PREFETCH after B has gone, releases reporting."""
    arb = Arbiter(Mode.SERIAL, None, capacity=10 * GiB, reserve=0, client_overhead=0)
    for c in "AB":
        arb.set_footprint(c, 6 * GiB, 0.0)
        arb.request(c, 0.0)
    now = arb.next_deadline()
    assert arb.tick(now) == [Drop("A", DropReason.QUANTUM, evict=True)]
    arb.release("A", now + HANDOFF)
    arb.request("A", now + HANDOFF)
    assert arb.disconnect("B", now + 1) == [Grant("A", arb.tq, prefetch=True)]
    arb.release("A", now + 2, report=SwitchReport(prefetch=report))
    return arb


def test_a_report_for_a_grant_without_prefetch_is_not_a_sample():
    arb = rotate({"A": 0.4, "B": 0.3}, rounds=1)   # A and B release grants without PREFETCH
    assert arb.prefetch_cost is None and len(arb._costs.prefetches) == 0
    arb = Arbiter(Mode.SERIAL, None)
    arb.request("A", 0.0)
    arb.release("A", 1.0, report=SwitchReport(prefetch=0.5))
    assert arb.switch_cost is None and arb.tq == DEFAULT_DYNAMIC_TQ


def test_a_client_that_disconnects_takes_its_average_with_it():
    arb = rotate({"A": 0.4, "B": 0.2, "C": 0.3})
    assert arb.prefetch_cost == pytest.approx(0.3)
    arb.disconnect("C", 1000.0)
    assert arb.prefetch_cost == pytest.approx(0.2)         # {0.2, 0.4}: the lower
    arb.disconnect("B", 1000.0)
    assert arb.prefetch_cost is None                       # one left: not enough
    assert arb.switch_cost == pytest.approx(HANDOFF)


def test_each_client_keeps_one_average_however_often_it_reports():
    """Many reports from one client move only its own average: with two others honest, the
    median stays theirs."""
    arb = rotate({"A": 0.2, "B": 0.3, "C": HUGE}, rounds=12)
    assert len(arb._costs.prefetches) == 3
    assert arb.prefetch_cost == pytest.approx(0.3)


@pytest.mark.parametrize("seed", range(20))
def test_the_lower_median_agrees_with_statistics_median_low(seed):
    rng = random.Random(seed)
    keeper, values = LowerMedian(), {}
    for _ in range(400):
        c = rng.randrange(25)
        if rng.random() < 0.3:
            keeper.discard(c)
            values.pop(c, None)
        else:
            v = rng.choice([rng.random(), float(rng.randrange(4))])  # ties too
            keeper.set(c, v)
            values[c] = v
        assert len(keeper) == len(values)
        assert keeper.get(c) == values.get(c)
        assert keeper.median() == (statistics.median_low(values.values()) if values else None)
    assert len(keeper._low) + len(keeper._high) <= 2 * len(values) + 17   # dead entries go
