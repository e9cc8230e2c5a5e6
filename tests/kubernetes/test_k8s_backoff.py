"""backoff.py, the one retry rule of the device plugin's registration, the pod watch and the health
sources: doubling from the first delay to the cap, less up to the jitter's part at random, and
from the start again after a success."""

import pytest

from xpushare.kubernetes.backoff import Backoff


def test_doubles_to_the_cap_and_starts_over_after_a_success():
    b = Backoff(1.0, 30.0)
    assert [b.failed() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.failures == 7
    b.succeeded()
    assert b.failed() == 1.0


@pytest.mark.parametrize("draw, expect", [(0.0, 8.0), (1.0, 6.0), (0.5, 7.0)])
def test_jitter_takes_up_to_its_part_off(draw, expect):
    b = Backoff(2.0, 100.0, jitter=0.25, rand=lambda: draw)
    b.failed(), b.failed()
    assert b.failed() == pytest.approx(expect)


def test_thousands_of_failures_stay_at_the_cap():
    b = Backoff(0.2, 30.0)
    for _ in range(5000):
        delay = b.failed()
    assert delay == 30.0


@pytest.mark.parametrize("args", [(0, 1), (2, 1), (1, 2, 1.0), (1, 2, -0.1)])
def test_a_backoff_that_cannot_work_is_refused(args):
    with pytest.raises(ValueError):
        Backoff(*args)
